//go:build metalsim && !darwin && cgo

package metal

import (
	"errors"
	"os"
)

// frameworks are the images the Objective-C layer opens: in a metalsim
// build, the Metal simulator (tests/metal/sim), which stands in for libobjc,
// Foundation and Metal at once. MC_METAL_SIM names it.
func frameworks() (objc, foundation, metal string, err error) {
	sim := os.Getenv("MC_METAL_SIM")
	if sim == "" {
		return "", "", "", errors.New("a metalsim build needs MC_METAL_SIM, the Metal simulator's library")
	}
	return sim, sim, sim, nil
}
