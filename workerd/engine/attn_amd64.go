package engine

import "golang.org/x/sys/cpu"

// haveF16C selects axpyF16RowsAVX2: F16C converts half precision exactly,
// and the float operations per element are the portable loop's.
var haveF16C = cpu.X86.HasAVX2 && cpu.X86.HasF16C

//go:noescape
func axpyF16RowsAVX2(acc *float64, v *uint16, off *int, p *float32, n int, blocks int)

// axpyF16RowsVec runs the assembly over acc's leading multiple of 32
// columns and returns how many it did (0 without F16C). The caller has
// checked that every off[k]+len(acc) is within v.
func axpyF16RowsVec(acc []float64, v []uint16, off []int, p []float32) int {
	blocks := len(acc) / 32
	if !haveF16C || blocks == 0 || len(off) == 0 {
		return 0
	}
	axpyF16RowsAVX2(&acc[0], &v[0], &off[0], &p[0], len(off), blocks)
	return blocks * 32
}
