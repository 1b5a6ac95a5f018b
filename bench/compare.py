"""Two runs of bench/cuda_bench.py side by side: every row's metalcore time
in run A and run B (same machine, one command) and B's time over A's.
python3 bench/compare.py A.md B.md [out.md] [label A] [label B]."""
import sys


def rows(path):
    """(op, dtype, shape) -> metalcore ms, for every table row of a report."""
    out, header = {}, None
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or set(cells[0]) <= set("-:"):
            continue
        if "ms" in " ".join(cells) and not any(c.replace(".", "").isdigit() for c in cells):
            header = cells
            continue
        if header is None:
            continue
        ms = next((i for i, h in enumerate(header) if h.startswith("metalcore") and "ms" in h), None)
        if ms is None:
            continue
        try:
            key = cells[:min(3, ms)]  # QR rows are keyed by their shape alone
            out[tuple(key + [""] * (3 - len(key)))] = float(cells[ms])
        except ValueError:
            pass
    return out


def main():
    a, b = rows(sys.argv[1]), rows(sys.argv[2])
    la = sys.argv[4] if len(sys.argv) > 4 else "A"
    lb = sys.argv[5] if len(sys.argv) > 5 else "B"
    lines = [f"| op | dtype | shape | {la} ms | {lb} ms | {lb} / {la} |", "|---|---|---|---:|---:|---:|"]
    worst = 0.0
    for key, ta in a.items():
        if key in b:
            r = b[key] / ta
            worst = max(worst, r)
            lines.append(f"| {' | '.join(key)} | {ta:.3f} | {b[key]:.3f} | {r:.3f} |")
    lines.append("")
    lines.append(f"{len(lines) - 3} rows; the slowest ratio {worst:.3f}.")
    text = "\n".join(lines) + "\n"
    print(text)
    if len(sys.argv) > 3:
        open(sys.argv[3], "w").write(text)


main()
