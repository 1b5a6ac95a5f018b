// Package cuda is the CUDA backend's machinery: the driver and NVRTC opened
// with dlopen at first use (nothing of CUDA is needed to build), kernels
// compiled by NVRTC for each device's own architecture and loaded once,
// contexts (the caller's current one, else the device's primary context,
// the one PyTorch uses), and launches on the caller's stream. It never
// synchronizes, allocates or copies on behalf of an op.
package cuda

// LibraryVersion is part of every compiled kernel's cache key (capi sets it
// from the header's version macros).
var LibraryVersion = "unknown"
