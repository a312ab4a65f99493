package expf

import (
	"math/bits"

	"golang.org/x/sys/cpu"
)

// useAVX512 selects expAVX512 (AVX512F for the float64 lanes and masks,
// DQ for the 512-bit float32 logic, VL for the 256-bit float32 lanes); a
// variable so tests run both paths.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

// expAVX512 computes blocks of eight elements from src into dst, Exp's or
// (silu) SiLU's results, by the fast method and the under/over ranges.
// It leaves the elements the method cannot prove untouched in dst, sets
// their bits in masks[b] for block b, and returns the OR of all masks.
//
//go:noescape
func expAVX512(dst, src *float32, blocks int, silu bool, masks *uint8, c *consts) uint8

// chunk is the number of blocks per expAVX512 call, bounding the masks
// kept on the stack.
const chunk = 64

// vec runs expAVX512 over src's leading multiple of eight elements and
// returns how many it did (0 without AVX-512). Elements it flags are
// computed one by one from src, which for dst == src still holds them.
func vec(dst, src []float32, silu bool) int {
	if !useAVX512 {
		return 0
	}
	done := 0
	var masks [chunk]uint8
	for len(src)-done >= 8 {
		b := min((len(src)-done)/8, chunk)
		d, s := dst[done:done+8*b], src[done:done+8*b]
		if expAVX512(&d[0], &s[0], b, silu, &masks[0], &c) != 0 {
			for i, m := range masks[:b] {
				for ; m != 0; m &= m - 1 {
					j := 8*i + bits.TrailingZeros8(m)
					if silu {
						x := s[j]
						d[j] = x / (1 + exp1(-x))
					} else {
						d[j] = exp1(s[j])
					}
				}
			}
		}
		done += 8 * b
	}
	return done
}
