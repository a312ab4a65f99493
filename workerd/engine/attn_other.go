//go:build !amd64

package engine

// axpyF16RowsVec has no vector form on this architecture.
func axpyF16RowsVec(acc []float64, v []uint16, off []int, p []float32) int { return 0 }
