// Command msl writes the MSL programs the Metal backend compiles at run
// time, a file an op family (`make msl`: build/msl/NAME.metal), for
// checkers and for reading.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"metalcore/backend/metal"
	_ "metalcore/ops/activation"
	_ "metalcore/ops/adamw"
	_ "metalcore/ops/cholesky"
	_ "metalcore/ops/eigh"
	_ "metalcore/ops/loss"
	_ "metalcore/ops/norm"
	_ "metalcore/ops/qr"
	_ "metalcore/ops/rope"
	_ "metalcore/ops/softmax"
	_ "metalcore/ops/solve"
	_ "metalcore/ops/svd"
)

func main() {
	out := flag.String("out", "build/msl", "the directory to write NAME.metal into")
	flag.Parse()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, f := range metal.Families() {
		prog, _, err := metal.Program(f.Source)
		if err == nil {
			err = os.WriteFile(filepath.Join(*out, f.Name+".metal"), []byte(prog), 0o644)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "msl: %s: %v\n", f.Name, err)
			os.Exit(1)
		}
	}
}
