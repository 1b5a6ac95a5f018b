"""The markdown table the Python benchmarks print and commit."""


class Report:
    """Call it with a line to print and keep it; save() writes the lines."""

    def __init__(self):
        self.lines = []

    def __call__(self, line):
        print(line, flush=True)
        self.lines.append(line)

    def save(self, path):
        if path:
            with open(path, "w") as f:
                f.write("\n".join(self.lines) + "\n")
