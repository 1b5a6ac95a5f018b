//go:build unix

package diskcache

import (
	"io/fs"
	"syscall"
)

// owner is the user owning the file info describes.
func owner(info fs.FileInfo) (int, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
