#include "textflag.h"

// The K-quant tiles: one weight row against four Q8_K activations, each
// super-block's weights unpacked, and its scales and mins decoded, once
// for the four. Every activation keeps its own eight integer lanes
// (exact: they are summed in a different grouping than q4KDotAVX2 and
// q6KDotAVX2 sum them, but integer sums do not depend on it) and gets the
// same float32 operations in the same order as the one-activation
// kernels, so each result is theirs bit for bit.

// Q4TACT is one activation's part of a Q4_K chunk (64 elements: the
// shuffled low nibbles in Y0, high nibbles in Y1, the two sub-block
// scales as an int16 pair broadcast in Y2): its 64 quants at yoff(qreg),
// reordered like the weights (lanePairs in Y11), multiplied pairwise
// (one lane per word, as in Q4CHUNK), the two sub-blocks' words
// interleaved and scaled by VPMADDWD: lanes 0-3 added to lo, lanes 4-7 to
// hi, each in both 128-bit halves (the halves are added once per
// super-block, not per chunk).
#define Q4TACT(qreg, yoff, lo, hi) \
	VMOVDQU yoff(qreg), Y12 \
	VPSHUFB Y11, Y12, Y12 \
	VPMADDUBSW Y12, Y0, Y12 \
	VMOVDQU yoff+32(qreg), Y13 \
	VPSHUFB Y11, Y13, Y13 \
	VPMADDUBSW Y13, Y1, Y13 \
	VPUNPCKLWD Y13, Y12, Y14 \
	VPUNPCKHWD Y13, Y12, Y12 \
	VPMADDWD Y2, Y14, Y14 \
	VPMADDWD Y2, Y12, Y12 \
	VPADDD Y14, lo, lo \
	VPADDD Y12, hi, hi

// Q4TCHUNK unpacks the 32 nibble bytes at qoff(SI) (Y15: bytes of 0x0f)
// and the scale pair at soff(SP) once, then runs the four activations.
#define Q4TCHUNK(qoff, yoff, soff) \
	VMOVDQU qoff(SI), Y0 \
	VPSHUFB Y11, Y0, Y0 \
	VPSRLW $4, Y0, Y1 \
	VPAND Y15, Y0, Y0 \
	VPAND Y15, Y1, Y1 \
	VPBROADCASTD soff(SP), Y2 \
	Q4TACT(DI, yoff, Y3, Y4) \
	Q4TACT(R8, yoff, Y5, Y6) \
	Q4TACT(R9, yoff, Y7, Y8) \
	Q4TACT(R10, yoff, Y9, Y10)

// KDVEC gathers the four activations' scales D[b] (at (R13)(BX*1) from
// each pointer in the array at R11) into X12, as a vector.
#define KDVEC \
	MOVQ 0(R11), R13 \
	VMOVSS (R13)(BX*1), X12 \
	MOVQ 8(R11), R13 \
	VINSERTPS $0x10, (R13)(BX*1), X12, X12 \
	MOVQ 16(R11), R13 \
	VINSERTPS $0x20, (R13)(BX*1), X12, X12 \
	MOVQ 24(R11), R13 \
	VINSERTPS $0x30, (R13)(BX*1), X12, X12

// KLANES turns activation k's split integer lanes (lo: lanes 0-3, hi:
// lanes 4-7, each in both 128-bit halves) into its super-block's float
// term and adds it to its float lanes at k*32(DX): lanes·(dw·D[b]), the
// product dw·D[b] of each activation computed lane-wise beforehand
// (16+4k(SP)); q4KDotAVX2's float operations.
#define KLANES(lo, hi, k) \
	VPERM2I128 $0x20, hi, lo, Y12 \
	VPERM2I128 $0x31, hi, lo, Y13 \
	VPADDD Y13, Y12, Y12 \
	VCVTDQ2PS Y12, Y12 \
	VBROADCASTSS (16+4*k)(SP), Y13 \
	VMULPS Y13, Y12, Y12 \
	VADDPS (k*32)(DX), Y12, Y12 \
	VMOVUPS Y12, (k*32)(DX)

// Q4SUMM puts activation k's Σ Sums32[j]·min[j] (four int32 partial
// sums; mins in X2) into x.
#define Q4SUMM(k, x) \
	MOVQ (k*8)(R12), R13 \
	VPMADDWD (R13)(BX*4), X2, x

// func q4KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)
//
// q4KDotAVX2 of one row with four activations: lanes[k] and mins[k] are
// what q4KDotAVX2 stores and returns for activation k. nb > 0.
TEXT ·q4KDot4AVX2(SB), NOSPLIT, $32-56
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), AX
	MOVQ 0(AX), DI
	MOVQ 8(AX), R8
	MOVQ 16(AX), R9
	MOVQ 24(AX), R10
	MOVQ d+24(FP), R11
	MOVQ sums32+32(FP), R12
	MOVQ lanes+40(FP), DX
	MOVQ mins+48(FP), AX
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y0, 32(DX)
	VMOVUPS Y0, 64(DX)
	VMOVUPS Y0, 96(DX)
	VMOVUPS X0, (AX)
	MOVL $0x0f0f0f0f, R13
	VMOVD R13, X15
	VPBROADCASTD X15, Y15
	VMOVDQU ·lanePairs(SB), Y11
	XORQ BX, BX

q4k4block:
	// Scales (to the stack, an int16 pair per chunk) and mins (X2), as
	// q4KDotAVX2 decodes them.
	MOVL 4(SI), R13
	ANDL $0x3f3f3f3f, R13
	VMOVD R13, X12
	MOVL 4(SI), R13
	SHRL $6, R13
	ANDL $0x03030303, R13
	SHLL $4, R13
	MOVL 12(SI), R14
	ANDL $0x0f0f0f0f, R14
	ORL R14, R13
	VPINSRD $1, R13, X12, X12
	VPMOVZXBW X12, X12
	VMOVDQU X12, 0(SP)
	MOVL 8(SI), R13
	ANDL $0x3f3f3f3f, R13
	VMOVD R13, X2
	MOVL 8(SI), R13
	SHRL $6, R13
	ANDL $0x03030303, R13
	SHLL $4, R13
	MOVL 12(SI), R14
	SHRL $4, R14
	ANDL $0x0f0f0f0f, R14
	ORL R14, R13
	VPINSRD $1, R13, X2, X2
	VPMOVZXBW X2, X2
	// The mins terms of the four activations side by side, each lane
	// q4KDotAVX2's scalar operations: summ exact (VPHADDD), then
	// mins -= float32(summ)·(dmin·D[b]). dw·D[b] goes to the stack.
	KDVEC
	MOVWLZX 2(SI), R13
	VMOVD R13, X14
	VCVTPH2PS X14, X14
	VBROADCASTSS X14, X14
	VMULPS X12, X14, X14
	Q4SUMM(0, X3)
	Q4SUMM(1, X4)
	Q4SUMM(2, X5)
	Q4SUMM(3, X6)
	VPHADDD X4, X3, X3
	VPHADDD X6, X5, X5
	VPHADDD X5, X3, X3
	VCVTDQ2PS X3, X3
	VMULPS X3, X14, X3
	VMOVUPS (AX), X4
	VSUBPS X3, X4, X4
	VMOVUPS X4, (AX)
	MOVWLZX 0(SI), R13
	VMOVD R13, X14
	VCVTPH2PS X14, X14
	VBROADCASTSS X14, X14
	VMULPS X12, X14, X14
	VMOVUPS X14, 16(SP)

	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	Q4TCHUNK(16, 0, 0)
	Q4TCHUNK(48, 64, 4)
	Q4TCHUNK(80, 128, 8)
	Q4TCHUNK(112, 192, 12)

	KLANES(Y3, Y4, 0)
	KLANES(Y5, Y6, 1)
	KLANES(Y7, Y8, 2)
	KLANES(Y9, Y10, 3)

	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $256, R8
	ADDQ $256, R9
	ADDQ $256, R10
	ADDQ $4, BX
	DECQ CX
	JNE q4k4block

	VZEROUPPER
	RET

// Q6TACT is one activation's part of a Q6_K chunk (two 16-element
// sub-blocks, one per 128-bit half): the weights q-32 reordered by
// lanePairs, their magnitudes in Y0 and signs in Y1, so VPMADDUBSW of
// |w| and y·sign(w) gives each word one lane's two products (at most
// 2·32·127, no saturation). VPMADDWD with E (Y2: each half's scale in
// the even words) and O (Y12: in the odd words) scales the even and the
// odd lanes into their own dwords, added to even and odd; the halves
// are added once per super-block.
#define Q6TACT(qreg, yoff, even, odd) \
	VMOVDQU yoff(qreg), Y13 \
	VPSHUFB Y11, Y13, Y13 \
	VPSIGNB Y1, Y13, Y13 \
	VPMADDUBSW Y13, Y0, Y13 \
	VPMADDWD Y12, Y13, Y14 \
	VPMADDWD Y2, Y13, Y13 \
	VPADDD Y13, even, even \
	VPADDD Y14, odd, odd

// Q6TCHUNK makes the chunk's quants once (as Q6CHUNK: nibbles at
// qloff(SI) shifted by nibshift, two high bits from qhoff(SI) shifted by
// hshift) and its E and O scale vectors from the int16 pair at soff(SP),
// then runs the four activations.
#define Q6TCHUNK(qloff, nibshift, qhoff, hshift, yoff, soff) \
	VMOVDQU qloff(SI), Y0 \
	VPSRLW $nibshift, Y0, Y0 \
	VPAND Y15, Y0, Y0 \
	VMOVDQU qhoff(SI), Y1 \
	VPSRLW $hshift, Y1, Y1 \
	VPAND bytes03<>(SB), Y1, Y1 \
	VPSLLW $4, Y1, Y1 \
	VPOR Y1, Y0, Y0 \
	VPSHUFB Y11, Y0, Y0 \
	VPSUBB bytes32<>(SB), Y0, Y1 \
	VPABSB Y1, Y0 \
	VPBROADCASTD soff(SP), Y2 \
	VPSLLVD halfShift<>(SB), Y2, Y2 \
	VPSRLD $16, Y2, Y2 \
	VPSLLD $16, Y2, Y12 \
	Q6TACT(DI, yoff, Y3, Y4) \
	Q6TACT(R8, yoff, Y5, Y6) \
	Q6TACT(R9, yoff, Y7, Y8) \
	Q6TACT(R10, yoff, Y9, Y10)

// K6LANES is KLANES for Q6TACT's even/odd split: the halves added and
// the lanes put in order by VPERMD (index in Y1), then q6KDotAVX2's
// float operations with dw·D[b] from the stack.
#define K6LANES(even, odd, k) \
	VPERM2I128 $0x20, odd, even, Y12 \
	VPERM2I128 $0x31, odd, even, Y13 \
	VPADDD Y13, Y12, Y12 \
	VPERMD Y12, Y1, Y12 \
	VCVTDQ2PS Y12, Y12 \
	VBROADCASTSS (32+4*k)(SP), Y13 \
	VMULPS Y13, Y12, Y12 \
	VADDPS (k*32)(DX), Y12, Y12 \
	VMOVUPS Y12, (k*32)(DX)

// evenOdd puts dwords (l0, l2, l4, l6, l1, l3, l5, l7) in order (VPERMD).
DATA evenOdd<>+0(SB)/8, $0x0000000400000000
DATA evenOdd<>+8(SB)/8, $0x0000000500000001
DATA evenOdd<>+16(SB)/8, $0x0000000600000002
DATA evenOdd<>+24(SB)/8, $0x0000000700000003
GLOBL evenOdd<>(SB), RODATA|NOPTR, $32

DATA bytes03<>+0(SB)/8, $0x0303030303030303
DATA bytes03<>+8(SB)/8, $0x0303030303030303
DATA bytes03<>+16(SB)/8, $0x0303030303030303
DATA bytes03<>+24(SB)/8, $0x0303030303030303
GLOBL bytes03<>(SB), RODATA|NOPTR, $32

DATA bytes32<>+0(SB)/8, $0x2020202020202020
DATA bytes32<>+8(SB)/8, $0x2020202020202020
DATA bytes32<>+16(SB)/8, $0x2020202020202020
DATA bytes32<>+24(SB)/8, $0x2020202020202020
GLOBL bytes32<>(SB), RODATA|NOPTR, $32

// halfShift: dword shift counts 16 in the low 128-bit half, 0 in the
// high one, so that (pair << halfShift) >> 16 keeps the pair's first
// int16 in the low half and its second in the high half.
DATA halfShift<>+0(SB)/8, $0x0000001000000010
DATA halfShift<>+8(SB)/8, $0x0000001000000010
DATA halfShift<>+16(SB)/8, $0
DATA halfShift<>+24(SB)/8, $0
GLOBL halfShift<>(SB), RODATA|NOPTR, $32

// func q6KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)
//
// q6KDotAVX2 of one row with four activations: lanes[k] is what
// q6KDotAVX2 stores for activation k. nb > 0.
TEXT ·q6KDot4AVX2(SB), NOSPLIT, $48-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), AX
	MOVQ 0(AX), DI
	MOVQ 8(AX), R8
	MOVQ 16(AX), R9
	MOVQ 24(AX), R10
	MOVQ d+24(FP), R11
	MOVQ lanes+32(FP), DX
	VXORPS Y0, Y0, Y0
	VMOVUPS Y0, 0(DX)
	VMOVUPS Y0, 32(DX)
	VMOVUPS Y0, 64(DX)
	VMOVUPS Y0, 96(DX)
	MOVL $0x0f0f0f0f, R13
	VMOVD R13, X15
	VPBROADCASTD X15, Y15
	VMOVDQU ·lanePairs(SB), Y11
	XORQ BX, BX

q6k4block:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	VPXOR Y9, Y9, Y9
	VPXOR Y10, Y10, Y10
	Q6TCHUNK(0, 0, 128, 0, 0, 0)
	Q6TCHUNK(32, 0, 128, 2, 32, 4)
	Q6TCHUNK(0, 4, 128, 4, 64, 8)
	Q6TCHUNK(32, 4, 128, 6, 96, 12)
	Q6TCHUNK(64, 0, 160, 0, 128, 16)
	Q6TCHUNK(96, 0, 160, 2, 160, 20)
	Q6TCHUNK(64, 4, 160, 4, 192, 24)
	Q6TCHUNK(96, 4, 160, 6, 224, 28)

	KDVEC
	MOVWLZX 208(SI), R13
	VMOVD R13, X0
	VCVTPH2PS X0, X0
	VBROADCASTSS X0, X0
	VMULPS X12, X0, X0
	VMOVUPS X0, 32(SP)
	VMOVDQU evenOdd<>(SB), Y1
	K6LANES(Y3, Y4, 0)
	K6LANES(Y5, Y6, 1)
	K6LANES(Y7, Y8, 2)
	K6LANES(Y9, Y10, 3)

	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $256, R8
	ADDQ $256, R9
	ADDQ $256, R10
	ADDQ $4, BX
	DECQ CX
	JNE q6k4block

	VZEROUPPER
	RET
