package core

import (
	"fmt"
	"sort"
)

// SameShape requires b to have a's shape.
func SameShape(a, b *View) error {
	if !equalShape(a.Shape, b.Shape) {
		return Errorf(ErrInvalidArgument, "%s has shape %v, %s has shape %v", b.Name, b.Shape, a.Name, a.Shape)
	}
	return nil
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// WantShape requires v (nil: no tensor) to have shape want, which what
// names ("a's shape without its last dimension").
func WantShape(v *View, want []int64, what string) error {
	if v == nil || equalShape(v.Shape, want) {
		return nil
	}
	return Errorf(ErrInvalidArgument, "%s has shape %v; it needs %s, %v", v.Name, v.Shape, what, want)
}

// SameDType requires every view to have the dtype of the first.
func SameDType(vs ...*View) error {
	for _, v := range vs[1:] {
		if v.DType != vs[0].DType {
			return Errorf(ErrUnsupportedDType, "%s is %s but %s is %s (mixed dtypes)", v.Name, v.DType, vs[0].Name, vs[0].DType)
		}
	}
	return nil
}

// WantDType requires v to have dtype d.
func WantDType(v *View, d DType) error {
	if v.DType != d {
		return Errorf(ErrUnsupportedDType, "%s is %s, must be %s", v.Name, v.DType, d)
	}
	return nil
}

// SameDevice requires every view to live on the device of the first.
func SameDevice(vs ...*View) error {
	for _, v := range vs[1:] {
		if v.DeviceType != vs[0].DeviceType || v.DeviceID != vs[0].DeviceID {
			return Errorf(ErrInvalidArgument, "%s is on %s:%d but %s is on %s:%d (one call, one device)",
				v.Name, deviceName(v.DeviceType), v.DeviceID, vs[0].Name, deviceName(vs[0].DeviceType), vs[0].DeviceID)
		}
	}
	return nil
}

// WantVector requires v to be 1-D with n elements, or, when outer is given,
// to have exactly the shape outer (a per-row tensor shaped like x[..., :1]
// without its last dimension).
func WantVector(v *View, n int, outer []int64) error {
	if len(v.Shape) == 1 && int(v.Shape[0]) == n {
		return nil
	}
	if outer != nil && equalShape(v.Shape, outer) {
		return nil
	}
	return Errorf(ErrInvalidArgument, "%s has shape %v, want [%d]", v.Name, v.Shape, n)
}

// WantContiguous requires every (non-nil) view to be row-major contiguous.
func WantContiguous(vs ...*View) error {
	for _, v := range vs {
		if v != nil && !v.Contiguous {
			return Errorf(ErrUnsupportedLayout, "%s must be contiguous", v.Name)
		}
	}
	return nil
}

// Outer is x's shape without its last dimension.
func Outer(x *View) []int64 {
	if len(x.Shape) == 0 {
		return x.Shape
	}
	return x.Shape[:len(x.Shape)-1]
}

// Alias names an output that may share memory exactly with an input (in
// place): same base, shape and strides.
type Alias struct{ Out, In *View }

// CheckOverlap rejects outputs that overlap themselves (repeated elements
// through zero or crossing strides), each other, or an input, except an
// output that exactly aliases its allowed input.
func CheckOverlap(inputs, outputs []*View, allowed ...Alias) error {
	for i, o := range outputs {
		if o.N == 0 {
			continue
		}
		if err := selfOverlap(o); err != nil {
			return err
		}
		for _, p := range outputs[:i] {
			if overlaps(o, p) {
				return Errorf(ErrInvalidArgument, "%s overlaps %s", o.Name, p.Name)
			}
		}
		for _, in := range inputs {
			if !overlaps(o, in) || exactAlias(o, in, allowed) {
				continue
			}
			if sameStart(o, in) && equalShape(o.Shape, in.Shape) {
				return Errorf(ErrInvalidArgument, "%s aliases %s, which this op does not allow in place", o.Name, in.Name)
			}
			return Errorf(ErrInvalidArgument, "%s partially overlaps %s", o.Name, in.Name)
		}
	}
	return nil
}

// sameStart reports whether a and b start at one place (for Metal, one
// offset of one buffer).
func sameStart(a, b *View) bool { return a.Base == b.Base && a.Offset == b.Offset }

func overlaps(a, b *View) bool {
	return a.N > 0 && b.N > 0 && a.Buffer == b.Buffer && a.lo < b.hi && b.lo < a.hi
}

func exactAlias(o, in *View, allowed []Alias) bool {
	for _, a := range allowed {
		if a.Out == o && a.In == in {
			return sameStart(o, in) && o.DType == in.DType && equalShape(o.Shape, in.Shape) &&
				equalShape(o.Strides, in.Strides)
		}
	}
	return false
}

// selfOverlap reports an output whose strides may map two indices to one
// address: sorted by stride, each dimension must step past the whole extent
// of the smaller ones.
func selfOverlap(v *View) error {
	if v.Strides == nil {
		return nil
	}
	type dim struct{ size, stride int64 }
	dims := make([]dim, 0, len(v.Shape))
	for i, s := range v.Shape {
		if s > 1 {
			st := v.Strides[i]
			if st < 0 {
				st = -st
			}
			dims = append(dims, dim{s, st})
		}
	}
	sort.Slice(dims, func(i, j int) bool { return dims[i].stride < dims[j].stride })
	span := int64(1)
	for _, d := range dims {
		if d.stride < span {
			return Errorf(ErrInvalidArgument, "%s has strides %v that make elements overlap", v.Name, v.Strides)
		}
		span += d.stride * (d.size - 1)
	}
	return nil
}

func deviceName(t int32) string {
	if n, ok := deviceNames[t]; ok {
		return n
	}
	return fmt.Sprintf("device type %d", t)
}

// WantBatchInfo requires info to hold one status per matrix of the batch
// a [..., n, n]: shaped as a without its last two dimensions (or [1] for
// one matrix).
func WantBatchInfo(a, info *View, batch int) error {
	nd := len(a.Shape)
	if info.N != batch || (len(info.Shape) != nd-2 && !(len(info.Shape) == 1 && nd == 2 && info.N == 1)) {
		return Errorf(ErrInvalidArgument, "info has shape %v; it needs one value per matrix of a %v "+
			"(a's shape without its last two dimensions)", info.Shape, a.Shape)
	}
	return nil
}
