//go:build darwin && cgo

package metal

// frameworks are the images the Objective-C layer opens: the system's.
func frameworks() (objc, foundation, metal string, err error) {
	return "/usr/lib/libobjc.A.dylib", "/System/Library/Frameworks/Foundation.framework/Foundation",
		"/System/Library/Frameworks/Metal.framework/Metal", nil
}
