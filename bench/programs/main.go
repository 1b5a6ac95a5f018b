// Command programs writes every CUDA kernel's program, as the library
// compiles it (one kernel a program), to a directory: NAME.cu, for
// bench/compile_times.py to compile on a GPU machine, which has no Go.
package main

import (
	"flag"
	"log"
	"os"
	"path/filepath"

	"metalcore/backend/cuda"
	_ "metalcore/ops/activation"
	_ "metalcore/ops/adamw"
	_ "metalcore/ops/norm"
	_ "metalcore/ops/qr"
	_ "metalcore/ops/softmax"
)

func main() {
	dir := flag.String("o", "build/programs", "output directory")
	flag.Parse()
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatal(err)
	}
	for name, src := range cuda.KernelPrograms() {
		if err := os.WriteFile(filepath.Join(*dir, name+".cu"), []byte(src), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
