#include "textflag.h"

// The Q8_0 prefill tile with AVX-512 (F, BW, VL, VNNI): sixteen
// activations per weight row (q8_0Tile16AVX512).
//
// It works on groups of eight blocks. A block's exact integer sum is
// made by VPDPBUSD from |w| (unsigned) and x with the sign of w (x in
// [-127, 127], so negating it cannot overflow; |w| of -128 reads as
// 128 unsigned): two blocks per 512-bit register, four registers per
// group, each dword four products (at most 4·128·127, no overflow).
// Q8FOLD reduces the four registers to the group's eight block sums in
// block order. Their terms float32(sumi)·(dw·dx) are then eight float32
// lanes per activation, and Q8ADD16 transposes the sixteen activations'
// terms so that each block's sixteen terms are one register, added to
// the sixteen sums (one lane per activation) block after block: every
// sum gets dotQ8_0's float operations in dotQ8_0's order.

// q8Fold (VPERMD) takes Q8FOLD's block sums (blocks 0, 2, 4, 6 in
// dwords 0-3, blocks 1, 3, 5, 7 in dwords 8-11) to block order.
DATA q8Fold<>+0(SB)/8, $0x0000000800000000
DATA q8Fold<>+8(SB)/8, $0x0000000900000001
DATA q8Fold<>+16(SB)/8, $0x0000000a00000002
DATA q8Fold<>+24(SB)/8, $0x0000000b00000003
DATA q8Fold<>+32(SB)/8, $0x0000000800000000
DATA q8Fold<>+40(SB)/8, $0x0000000900000001
DATA q8Fold<>+48(SB)/8, $0x0000000a00000002
DATA q8Fold<>+56(SB)/8, $0x0000000b00000003
GLOBL q8Fold<>(SB), RODATA|NOPTR, $64

// Q8FOLD adds up each block's eight dwords: Z4 holds blocks 0 and 1
// (dwords 0-7, 8-15), Z5 blocks 2 and 3, Z6 4 and 5, Z7 6 and 7. Two
// rounds of pairwise sums within 128-bit lanes leave lane L of Z4 with
// the four registers' quarter-sums of lane L; adding lanes 0+1 and 2+3
// completes the even and the odd blocks, and VPERMD by Z29 (q8Fold)
// puts the eight sums in block order in Y4. Exact; uses Z8.
#define Q8FOLD \
	VSHUFPS $0x88, Z5, Z4, Z8 \
	VSHUFPS $0xDD, Z5, Z4, Z4 \
	VPADDD Z8, Z4, Z4 \
	VSHUFPS $0x88, Z7, Z6, Z8 \
	VSHUFPS $0xDD, Z7, Z6, Z6 \
	VPADDD Z8, Z6, Z6 \
	VSHUFPS $0x88, Z6, Z4, Z8 \
	VSHUFPS $0xDD, Z6, Z4, Z4 \
	VPADDD Z8, Z4, Z4 \
	VSHUFI32X4 $0xB1, Z4, Z4, Z8 \
	VPADDD Z8, Z4, Z4 \
	VPERMD Z4, Z29, Z4

// Q8SCALES converts the eight F16 weight scales of the group at base
// (34 bytes apart) to float32 in Y15 (all eight words of X15 replaced).
#define Q8SCALES(base) \
	VPINSRW $0, 0(base), X15, X15 \
	VPINSRW $1, 34(base), X15, X15 \
	VPINSRW $2, 68(base), X15, X15 \
	VPINSRW $3, 102(base), X15, X15 \
	VPINSRW $4, 136(base), X15, X15 \
	VPINSRW $5, 170(base), X15, X15 \
	VPINSRW $6, 204(base), X15, X15 \
	VPINSRW $7, 238(base), X15, X15 \
	VCVTPH2PS X15, Y15

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

// Q8TACT is activation k of the tile: its group of 256 quants (at DI in
// the array its pointer, 8k(R10), points to) signed by the weights (K1-K4)
// and multiplied with the magnitudes Z16-Z19, folded, then its eight
// terms float32(sumi)·(dw·dx) (dw in Y15, dx at BX in its scales, whose
// pointer is 8k(R11)) stored at 32k(SP).
#define Q8TACT(k) \
	MOVQ (8*k)(R10), R12 \
	VMOVDQU64 0(R12)(DI*1), Z0 \
	VMOVDQU64 64(R12)(DI*1), Z1 \
	VMOVDQU64 128(R12)(DI*1), Z2 \
	VMOVDQU64 192(R12)(DI*1), Z3 \
	VPSUBB Z0, Z28, K1, Z0 \
	VPSUBB Z1, Z28, K2, Z1 \
	VPSUBB Z2, Z28, K3, Z2 \
	VPSUBB Z3, Z28, K4, Z3 \
	VPXORD Z4, Z4, Z4 \
	VPXORD Z5, Z5, Z5 \
	VPXORD Z6, Z6, Z6 \
	VPXORD Z7, Z7, Z7 \
	VPDPBUSD Z0, Z16, Z4 \
	VPDPBUSD Z1, Z17, Z5 \
	VPDPBUSD Z2, Z18, Z6 \
	VPDPBUSD Z3, Z19, Z7 \
	Q8FOLD \
	VCVTDQ2PS Y4, Y4 \
	MOVQ (8*k)(R11), R12 \
	VMULPS (R12)(BX*1), Y15, Y5 \
	VMULPS Y5, Y4, Y4 \
	VMOVUPS Y4, (32*k)(SP)

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
	Q8TACT(0)
	Q8TACT(1)
	Q8TACT(2)
	Q8TACT(3)
	Q8TACT(4)
	Q8TACT(5)
	Q8TACT(6)
	Q8TACT(7)
	Q8TACT(8)
	Q8TACT(9)
	Q8TACT(10)
	Q8TACT(11)
	Q8TACT(12)
	Q8TACT(13)
	Q8TACT(14)
	Q8TACT(15)
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
