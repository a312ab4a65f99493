package engine

import "math"

// silu is the definition the feed-forward's activation (expf.SiLU) keeps
// bit for bit.
func silu(x float32) float32 { return x / (1 + float32(math.Exp(float64(-x)))) }
