#include "textflag.h"

// The Q8_0 prefill tile with AVX-512 (F, BW, VL, VNNI): sixteen
// activations per weight row (q8_0Tile16AVX512).
//
// It works on groups of eight blocks. A block's exact integer sum is
// made by VPDPBUSD from |w| (unsigned) and x with the sign of w (x in
// [-127, 127], so negating it cannot overflow; |w| of -128 reads as
// 128 unsigned): two blocks per 512-bit register, four registers per
// group, each dword four products (at most 4·128·127, no overflow).
// Q8QUARTERS and Q8FOLD2 reduce the four registers to the group's
// eight block sums in block order, two activations at a time. Their
// terms float32(sumi)·(dw·dx) are then eight float32 lanes per
// activation, and Q8ADD16 transposes the sixteen activations' terms so
// that each block's sixteen terms are one register, added to the
// sixteen sums (one lane per activation) block after block: every sum
// gets dotQ8_0's float operations in dotQ8_0's order.

// q8Fold (VPERMD) takes Q8FOLD2's block sums (in dwords 0-3 the first
// activation's blocks 0, 2, 4, 6, in 4-7 its blocks 1, 3, 5, 7, in
// 8-15 the second's likewise) to block order, the first activation's
// eight in the low half.
DATA q8Fold<>+0(SB)/8, $0x0000000400000000
DATA q8Fold<>+8(SB)/8, $0x0000000500000001
DATA q8Fold<>+16(SB)/8, $0x0000000600000002
DATA q8Fold<>+24(SB)/8, $0x0000000700000003
DATA q8Fold<>+32(SB)/8, $0x0000000c00000008
DATA q8Fold<>+40(SB)/8, $0x0000000d00000009
DATA q8Fold<>+48(SB)/8, $0x0000000e0000000a
DATA q8Fold<>+56(SB)/8, $0x0000000f0000000b
GLOBL q8Fold<>(SB), RODATA|NOPTR, $64

// Q8QUARTERS adds up each block's dwords within 128-bit lanes: a holds
// blocks 0 and 1 of a group (dwords 0-7, 8-15), b blocks 2 and 3, c 4
// and 5, d 6 and 7. Two rounds of pairwise sums leave lane L of a with
// the four registers' sums of their lane L: lanes 0 and 1 the halves of
// blocks 0, 2, 4, 6, lanes 2 and 3 those of blocks 1, 3, 5, 7. Exact;
// uses t.
#define Q8QUARTERS(a, b, c, d, t) \
	VSHUFPS $0x88, b, a, t \
	VSHUFPS $0xDD, b, a, a \
	VPADDD t, a, a \
	VSHUFPS $0x88, d, c, t \
	VSHUFPS $0xDD, d, c, c \
	VPADDD t, c, c \
	VSHUFPS $0x88, c, a, t \
	VSHUFPS $0xDD, c, a, a \
	VPADDD t, a, a

// Q8FOLD2 completes two activations' block sums from their quarters
// (Z4, Z12): lanes 0+1 and 2+3 of each added, then VPERMD by Z29
// (q8Fold) leaves Z4 with the first activation's eight sums in block
// order in the low half and the second's in the high half. Exact; uses
// Z20 and Z21.
#define Q8FOLD2 \
	VSHUFI32X4 $0x88, Z12, Z4, Z20 \
	VSHUFI32X4 $0xDD, Z12, Z4, Z21 \
	VPADDD Z21, Z20, Z4 \
	VPERMD Z4, Z29, Z4

// Q8SCALES converts the eight F16 weight scales of the group at base
// (34 bytes apart) to float32 in both halves of Z30 (through X15, all
// eight of its words replaced, and Y15).
#define Q8SCALES(base) \
	VPINSRW $0, 0(base), X15, X15 \
	VPINSRW $1, 34(base), X15, X15 \
	VPINSRW $2, 68(base), X15, X15 \
	VPINSRW $3, 102(base), X15, X15 \
	VPINSRW $4, 136(base), X15, X15 \
	VPINSRW $5, 170(base), X15, X15 \
	VPINSRW $6, 204(base), X15, X15 \
	VPINSRW $7, 238(base), X15, X15 \
	VCVTPH2PS X15, Y15 \
	VINSERTF64X4 $1, Y15, Z15, Z30

// Q8ADD16 adds sixteen activations' terms, eight blocks each
// (activation k's at 32k(R13), block b in lane b), to their sums in Z31, block 0's sixteen
// terms first. Activations k and k+8 share a register (256-bit halves),
// an 8×8 transpose of each half makes one register per block, its
// lanes the activations in the order 0-3, 8-11, 4-7, 12-15 (Z31's order). Uses
// Z0-Z15.
#define Q8ADD16 \
	VMOVUPS 0(R13), Y0 \
	VINSERTF64X4 $1, 256(R13), Z0, Z0 \
	VMOVUPS 32(R13), Y1 \
	VINSERTF64X4 $1, 288(R13), Z1, Z1 \
	VMOVUPS 64(R13), Y2 \
	VINSERTF64X4 $1, 320(R13), Z2, Z2 \
	VMOVUPS 96(R13), Y3 \
	VINSERTF64X4 $1, 352(R13), Z3, Z3 \
	VMOVUPS 128(R13), Y4 \
	VINSERTF64X4 $1, 384(R13), Z4, Z4 \
	VMOVUPS 160(R13), Y5 \
	VINSERTF64X4 $1, 416(R13), Z5, Z5 \
	VMOVUPS 192(R13), Y6 \
	VINSERTF64X4 $1, 448(R13), Z6, Z6 \
	VMOVUPS 224(R13), Y7 \
	VINSERTF64X4 $1, 480(R13), Z7, Z7 \
	VUNPCKLPS Z1, Z0, Z8 \
	VUNPCKHPS Z1, Z0, Z9 \
	VUNPCKLPS Z3, Z2, Z10 \
	VUNPCKHPS Z3, Z2, Z11 \
	VUNPCKLPS Z5, Z4, Z12 \
	VUNPCKHPS Z5, Z4, Z13 \
	VUNPCKLPS Z7, Z6, Z14 \
	VUNPCKHPS Z7, Z6, Z15 \
	VSHUFPS $0x44, Z10, Z8, Z0 \
	VSHUFPS $0xEE, Z10, Z8, Z1 \
	VSHUFPS $0x44, Z11, Z9, Z2 \
	VSHUFPS $0xEE, Z11, Z9, Z3 \
	VSHUFPS $0x44, Z14, Z12, Z4 \
	VSHUFPS $0xEE, Z14, Z12, Z5 \
	VSHUFPS $0x44, Z15, Z13, Z6 \
	VSHUFPS $0xEE, Z15, Z13, Z7 \
	VSHUFF32X4 $0x88, Z4, Z0, Z8 \
	VSHUFF32X4 $0x88, Z5, Z1, Z9 \
	VSHUFF32X4 $0x88, Z6, Z2, Z10 \
	VSHUFF32X4 $0x88, Z7, Z3, Z11 \
	VSHUFF32X4 $0xDD, Z4, Z0, Z12 \
	VSHUFF32X4 $0xDD, Z5, Z1, Z13 \
	VSHUFF32X4 $0xDD, Z6, Z2, Z14 \
	VSHUFF32X4 $0xDD, Z7, Z3, Z15 \
	VADDPS Z8, Z31, Z31 \
	VADDPS Z9, Z31, Z31 \
	VADDPS Z10, Z31, Z31 \
	VADDPS Z11, Z31, Z31 \
	VADDPS Z12, Z31, Z31 \
	VADDPS Z13, Z31, Z31 \
	VADDPS Z14, Z31, Z31 \
	VADDPS Z15, Z31, Z31

// Q8WPAIR loads weight blocks 2j and 2j+1 of the group at base (their
// 32 quants each, after the F16 scale) into zw, their signs to kw and
// their magnitudes to zw.
#define Q8WPAIR(base, j, zw, kw) \
	VMOVDQU (2+68*j)(base), Y0 \
	VINSERTI64X4 $1, (36+68*j)(base), Z0, zw \
	VPMOVB2M zw, kw \
	VPABSB zw, zw

// Q8TINT is activation k's integer part: its group of 256 quants (at DI
// in the array its pointer, 8k(R10), points to) signed by the weights
// (K1-K4) into x0-x3 and multiplied with the magnitudes Z16-Z19 into
// the dword partials a0-a3 (blocks 0-1, 2-3, 4-5, 6-7).
#define Q8TINT(k, x0, x1, x2, x3, a0, a1, a2, a3) \
	MOVQ (8*k)(R10), R12 \
	VMOVDQU64 0(R12)(DI*1), x0 \
	VMOVDQU64 64(R12)(DI*1), x1 \
	VMOVDQU64 128(R12)(DI*1), x2 \
	VMOVDQU64 192(R12)(DI*1), x3 \
	VPSUBB x0, Z28, K1, x0 \
	VPSUBB x1, Z28, K2, x1 \
	VPSUBB x2, Z28, K3, x2 \
	VPSUBB x3, Z28, K4, x3 \
	VPXORD a0, a0, a0 \
	VPXORD a1, a1, a1 \
	VPXORD a2, a2, a2 \
	VPXORD a3, a3, a3 \
	VPDPBUSD x0, Z16, a0 \
	VPDPBUSD x1, Z17, a1 \
	VPDPBUSD x2, Z18, a2 \
	VPDPBUSD x3, Z19, a3

// Q8TACT2 is activations k and k1 = k+1 of the tile: their block sums
// (Q8TINT, Q8QUARTERS, Q8FOLD2), then their eight terms each,
// float32(sumi)·(dw·dx), dw in Z30 and dx at BX in the scales whose
// pointers are 8k(R11) and 8k1(R11), stored at 32k(SP) and 32k1(SP).
#define Q8TACT2(k, k1) \
	Q8TINT(k, Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	Q8TINT(k1, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q8QUARTERS(Z4, Z5, Z6, Z7, Z20) \
	Q8QUARTERS(Z12, Z13, Z14, Z15, Z21) \
	Q8FOLD2 \
	VCVTDQ2PS Z4, Z4 \
	MOVQ (8*k)(R11), R12 \
	VMOVUPS (R12)(BX*1), Y5 \
	MOVQ (8*k1)(R11), R12 \
	VINSERTF64X4 $1, (R12)(BX*1), Z5, Z5 \
	VMULPS Z30, Z5, Z5 \
	VMULPS Z5, Z4, Z4 \
	VMOVUPS Z4, (32*k)(SP)

// func q8_0Tile16AVX512(row *byte, nb int, q *[16]*int8, d *[16]*float32, out *[16]float32)
//
// dotQ8_0 of one weight row with sixteen activations (prefill's tile),
// nb a positive multiple of 8: each group of eight weight blocks is
// loaded, its signs and magnitudes and scales made once for the
// sixteen. out[k] is Dot(row, activation k) bit for bit.
TEXT ·q8_0Tile16AVX512(SB), $512-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	SHRQ $3, CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	XORQ DI, DI
	XORQ BX, BX
	VPXORD Z28, Z28, Z28
	VPXORD Z31, Z31, Z31
	VMOVDQU64 q8Fold<>(SB), Z29

q8tile16:
	Q8WPAIR(SI, 0, Z16, K1)
	Q8WPAIR(SI, 1, Z17, K2)
	Q8WPAIR(SI, 2, Z18, K3)
	Q8WPAIR(SI, 3, Z19, K4)
	Q8SCALES(SI)
	Q8TACT2(0, 1)
	Q8TACT2(2, 3)
	Q8TACT2(4, 5)
	Q8TACT2(6, 7)
	Q8TACT2(8, 9)
	Q8TACT2(10, 11)
	Q8TACT2(12, 13)
	Q8TACT2(14, 15)
	MOVQ SP, R13
	Q8ADD16
	ADDQ $272, SI
	ADDQ $256, DI
	ADDQ $32, BX
	DECQ CX
	JNE q8tile16

	// Lanes back to activation order: 128-bit lanes 0, 2, 1, 3.
	VSHUFF32X4 $0xD8, Z31, Z31, Z31
	MOVQ out+32(FP), DX
	VMOVUPS Z31, (DX)
	VZEROUPPER
	RET
