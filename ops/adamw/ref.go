package adamw

import "math"

// RefStep is one AdamW step in float64 on one tensor, PyTorch's algorithm
// (vmax nil unless amsgrad).
func RefStep(c *Config, p, g, m, v, vmax []float64) {
	bc1 := 1 - math.Pow(c.Beta1, float64(c.Step))
	bc2 := 1 - math.Pow(c.Beta2, float64(c.Step))
	for i := range p {
		gi := g[i]
		if c.Maximize != 0 {
			gi = -gi
		}
		p[i] *= 1 - c.LR*c.WeightDecay
		m[i] += (1 - c.Beta1) * (gi - m[i])
		v[i] = c.Beta2*v[i] + (1-c.Beta2)*gi*gi
		vi := v[i]
		if vmax != nil {
			vmax[i] = math.Max(vmax[i], v[i])
			vi = vmax[i]
		}
		p[i] -= c.LR / bc1 * m[i] / (math.Sqrt(vi)/math.Sqrt(bc2) + c.Eps)
	}
}
