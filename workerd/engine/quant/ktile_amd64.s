#include "textflag.h"

// The K-quant tiles: one weight row against four or eight Q8_K
// activations, each super-block's weights unpacked, and its scales and
// mins decoded, once for all of them. The activations' quants are read
// in tile order (Act.QT, arranged by Prepare the way the weights are
// arranged here), so that one VPMADDUBSW word holds one lane's products
// of one sub-block (ggml's reference lanes: element index mod 8) beside
// the same lane's products of the paired sub-block, and one VPMADDWD by
// the two sub-block scales leaves the eight integer lanes in order: five
// instructions per activation and chunk. The integer lanes are exact
// (summed in another grouping than q4KDotAVX2's and q6KDotAVX2's, which
// integer sums do not see) and every activation gets those kernels'
// float32 operations in their order, so each result is theirs bit for
// bit.
//
// Registers: SI the weight row, DI the offset of the super-block in each
// activation's QT (b·256), BX the offset of its scale D[b] (b·4), R10,
// R11, R12 the arrays of QT, D and Sums32 pointers, DX the float lanes,
// AX the mins sums, R13 and R14 scratch; Y4-Y11 the activations' integer
// lanes, Y15 bytes of 0x0f.

// KDVEC gathers the scales D[b] of activations 4g..4g+3 into X12.
#define KDVEC(g) \
	MOVQ (g*32)(R11), R13 \
	VMOVSS (R13)(BX*1), X12 \
	MOVQ (g*32+8)(R11), R13 \
	VINSERTPS $0x10, (R13)(BX*1), X12, X12 \
	MOVQ (g*32+16)(R11), R13 \
	VINSERTPS $0x20, (R13)(BX*1), X12, X12 \
	MOVQ (g*32+24)(R11), R13 \
	VINSERTPS $0x30, (R13)(BX*1), X12, X12

// KDSCALE gathers D[b] of activations 4g..4g+3 into X12 (KDVEC) and
// stores dw·D[b] at soff+16g(SP), the F16 weight scale at woff(SI), each
// lane the scalar kernel's product.
#define KDSCALE(g, woff, soff) \
	KDVEC(g) \
	MOVWLZX woff(SI), R13 \
	VMOVD R13, X14 \
	VCVTPH2PS X14, X14 \
	VBROADCASTSS X14, X14 \
	VMULPS X12, X14, X14 \
	VMOVUPS X14, (soff+16*g)(SP)

// KLANES adds activation k's super-block term to its float lanes at
// k*32(DX): float32(lanes)·(dw·D[b]) (the product at soff+4k(SP)), the
// one-activation kernels' operations. acc is free afterwards.
#define KLANES(acc, k, soff) \
	VCVTDQ2PS acc, acc \
	VBROADCASTSS (soff+4*k)(SP), Y3 \
	VMULPS Y3, acc, acc \
	VADDPS (k*32)(DX), acc, acc \
	VMOVUPS acc, (k*32)(DX)

#define KZERO \
	VPXOR Y4, Y4, Y4 \
	VPXOR Y5, Y5, Y5 \
	VPXOR Y6, Y6, Y6 \
	VPXOR Y7, Y7, Y7 \
	VPXOR Y8, Y8, Y8 \
	VPXOR Y9, Y9, Y9 \
	VPXOR Y10, Y10, Y10 \
	VPXOR Y11, Y11, Y11

// Q4SCALES decodes a Q4_K super-block's six-bit scales to int16s at
// 0(SP) (a dword pair per 64-element chunk) and its mins to int16s in
// X2 (ggml's utmp shuffle, as q4KDotAVX2).
#define Q4SCALES \
	MOVL 4(SI), R13 \
	ANDL $0x3f3f3f3f, R13 \
	VMOVD R13, X12 \
	MOVL 4(SI), R13 \
	SHRL $6, R13 \
	ANDL $0x03030303, R13 \
	SHLL $4, R13 \
	MOVL 12(SI), R14 \
	ANDL $0x0f0f0f0f, R14 \
	ORL R14, R13 \
	VPINSRD $1, R13, X12, X12 \
	VPMOVZXBW X12, X12 \
	VMOVDQU X12, 0(SP) \
	MOVL 8(SI), R13 \
	ANDL $0x3f3f3f3f, R13 \
	VMOVD R13, X2 \
	MOVL 8(SI), R13 \
	SHRL $6, R13 \
	ANDL $0x03030303, R13 \
	SHLL $4, R13 \
	MOVL 12(SI), R14 \
	SHRL $4, R14 \
	ANDL $0x0f0f0f0f, R14 \
	ORL R14, R13 \
	VPINSRD $1, R13, X2, X2 \
	VPMOVZXBW X2, X2

// Q4SUMM puts activation k's Σ Sums32[j]·min[j] (four int32 partial
// sums; mins in X2) into x.
#define Q4SUMM(k, x) \
	MOVQ (k*8)(R12), R13 \
	VPMADDWD (R13)(BX*4), X2, x

// Q4MINS subtracts the mins terms of activations 4g..4g+3 (their D[b]
// in X12, as KDSCALE leaves them) from their sums at 16g(AX), side by
// side, each lane q4KDotAVX2's scalar operations: summ exact (VPHADDD),
// then mins -= float32(summ)·(dmin·D[b]).
#define Q4MINS(g) \
	MOVWLZX 2(SI), R13 \
	VMOVD R13, X14 \
	VCVTPH2PS X14, X14 \
	VBROADCASTSS X14, X14 \
	VMULPS X12, X14, X14 \
	Q4SUMM((4*g), X0) \
	Q4SUMM((4*g+1), X1) \
	Q4SUMM((4*g+2), X3) \
	Q4SUMM((4*g+3), X12) \
	VPHADDD X1, X0, X0 \
	VPHADDD X12, X3, X3 \
	VPHADDD X3, X0, X0 \
	VCVTDQ2PS X0, X0 \
	VMULPS X0, X14, X0 \
	VMOVUPS (16*g)(AX), X1 \
	VSUBPS X0, X1, X1 \
	VMOVUPS X1, (16*g)(AX)

// Q4W arranges the 32 nibble bytes at qoff(SI) (64 elements: the low
// nibbles one sub-block A, the high ones the next, B) in tile order:
// W1 (Y13) holds elements 0-15 of A and B, W2 (Y1) elements 16-31, each
// 128-bit half four lanes, per lane A's elements l and l+8, then B's.
// Y2 gets the chunk's scale pair (sa, sb) from soff(SP).
#define Q4W(qoff, soff) \
	VMOVDQU qoff(SI), Y13 \
	VPSHUFB ·lanePairs(SB), Y13, Y13 \
	VPSRLW $4, Y13, Y14 \
	VPAND Y15, Y13, Y13 \
	VPAND Y15, Y14, Y14 \
	VPUNPCKLWD Y14, Y13, Y0 \
	VPUNPCKHWD Y14, Y13, Y1 \
	VPERM2I128 $0x20, Y1, Y0, Y13 \
	VPERM2I128 $0x31, Y1, Y0, Y1 \
	VPBROADCASTD soff(SP), Y2

// Q4ACT: activation k's 64 quants of the chunk (tile order, at yoff in
// its QT) against W1 and W2; the words (A's and B's part of each lane,
// at most 4·15·127) scaled by (sa, sb) into the lanes acc.
#define Q4ACT(k, yoff, acc) \
	MOVQ (k*8)(R10), R13 \
	VPMADDUBSW yoff(R13)(DI*1), Y13, Y3 \
	VPMADDUBSW (yoff+32)(R13)(DI*1), Y1, Y12 \
	VPADDW Y12, Y3, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VPADDD Y3, acc, acc

#define Q4CHUNK4(qoff, yoff, soff) \
	Q4W(qoff, soff) \
	Q4ACT(0, yoff, Y4) \
	Q4ACT(1, yoff, Y5) \
	Q4ACT(2, yoff, Y6) \
	Q4ACT(3, yoff, Y7)

#define Q4CHUNK8(qoff, yoff, soff) \
	Q4CHUNK4(qoff, yoff, soff) \
	Q4ACT(4, yoff, Y8) \
	Q4ACT(5, yoff, Y9) \
	Q4ACT(6, yoff, Y10) \
	Q4ACT(7, yoff, Y11)

// KINIT zeroes the n activations' lanes at DX (leaving X0 zero) and sets
// the constants and offsets.
#define KINIT(n) \
	VXORPS Y0, Y0, Y0 \
	MOVQ $0, R13 \
	MOVQ $(n*32), R14 \
	VMOVUPS Y0, (DX)(R13*1) \
	ADDQ $32, R13 \
	CMPQ R13, R14 \
	JLT -3(PC) \
	MOVL $0x0f0f0f0f, R13 \
	VMOVD R13, X15 \
	VPBROADCASTD X15, Y15 \
	XORQ DI, DI \
	XORQ BX, BX

#define KNEXT(size) \
	ADDQ $size, SI \
	ADDQ $256, DI \
	ADDQ $4, BX \
	DECQ CX

// func q4KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)
//
// q4KDotAVX2 of one row with four activations (q: their QT): lanes[k]
// and mins[k] are what q4KDotAVX2 stores and returns for activation k.
// nb > 0.
TEXT ·q4KDot4AVX2(SB), NOSPLIT, $32-56
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ sums32+32(FP), R12
	MOVQ lanes+40(FP), DX
	MOVQ mins+48(FP), AX
	KINIT(4)
	VMOVUPS X0, (AX)

q4k4block:
	Q4SCALES
	KDSCALE(0, 0, 16)
	Q4MINS(0)
	KZERO
	Q4CHUNK4(16, 0, 0)
	Q4CHUNK4(48, 64, 4)
	Q4CHUNK4(80, 128, 8)
	Q4CHUNK4(112, 192, 12)
	KLANES(Y4, 0, 16)
	KLANES(Y5, 1, 16)
	KLANES(Y6, 2, 16)
	KLANES(Y7, 3, 16)
	KNEXT(144)
	JNE q4k4block

	VZEROUPPER
	RET

// func q4KDot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, sums32 *[8]*int16, lanes *[8][8]float32, mins *[8]float32)
//
// q4KDot4AVX2 for eight activations.
TEXT ·q4KDot8AVX2(SB), NOSPLIT, $48-56
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ sums32+32(FP), R12
	MOVQ lanes+40(FP), DX
	MOVQ mins+48(FP), AX
	KINIT(8)
	VMOVUPS X0, (AX)
	VMOVUPS X0, 16(AX)

q4k8block:
	Q4SCALES
	KDSCALE(0, 0, 16)
	Q4MINS(0)
	KDSCALE(1, 0, 16)
	Q4MINS(1)
	KZERO
	Q4CHUNK8(16, 0, 0)
	Q4CHUNK8(48, 64, 4)
	Q4CHUNK8(80, 128, 8)
	Q4CHUNK8(112, 192, 12)
	KLANES(Y4, 0, 16)
	KLANES(Y5, 1, 16)
	KLANES(Y6, 2, 16)
	KLANES(Y7, 3, 16)
	KLANES(Y8, 4, 16)
	KLANES(Y9, 5, 16)
	KLANES(Y10, 6, 16)
	KLANES(Y11, 7, 16)
	KNEXT(144)
	JNE q4k8block

	VZEROUPPER
	RET

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

// q6Dwords (VPERMD) puts dwords 0, 2, 4, 6 (elements 0-3, 8-11, 16-19,
// 24-27) in the low half and 1, 3, 5, 7 in the high half; q6Bytes
// (VPSHUFB) then orders each half's bytes l, l+8, l+16, l+24 per lane l.
DATA q6Dwords<>+0(SB)/8, $0x0000000200000000
DATA q6Dwords<>+8(SB)/8, $0x0000000600000004
DATA q6Dwords<>+16(SB)/8, $0x0000000300000001
DATA q6Dwords<>+24(SB)/8, $0x0000000700000005
GLOBL q6Dwords<>(SB), RODATA|NOPTR, $32

DATA q6Bytes<>+0(SB)/8, $0x0d0905010c080400
DATA q6Bytes<>+8(SB)/8, $0x0f0b07030e0a0602
DATA q6Bytes<>+16(SB)/8, $0x0d0905010c080400
DATA q6Bytes<>+24(SB)/8, $0x0f0b07030e0a0602
GLOBL q6Bytes<>(SB), RODATA|NOPTR, $32

// Q6W makes a Q6_K chunk's 32 quants (two 16-element sub-blocks A and
// B; as Q6CHUNK: nibbles at qloff(SI) shifted by nibshift, two high bits
// from qhoff(SI) shifted by hshift) in tile order (per lane l: A's
// elements l and l+8, then B's; lanes 0-3 in the low half), w = q-32 in
// Y1 and |w| in Y0, and the scale pair (sa, sb) from soff(SP) in Y2.
#define Q6W(qloff, nibshift, qhoff, hshift, soff) \
	VMOVDQU qloff(SI), Y12 \
	VPSRLW $nibshift, Y12, Y12 \
	VPAND Y15, Y12, Y12 \
	VMOVDQU qhoff(SI), Y13 \
	VPSRLW $hshift, Y13, Y13 \
	VPAND bytes03<>(SB), Y13, Y13 \
	VPSLLW $4, Y13, Y13 \
	VPOR Y13, Y12, Y12 \
	VMOVDQU q6Dwords<>(SB), Y13 \
	VPERMD Y12, Y13, Y12 \
	VPSHUFB q6Bytes<>(SB), Y12, Y12 \
	VPSUBB bytes32<>(SB), Y12, Y1 \
	VPABSB Y1, Y0 \
	VPBROADCASTD soff(SP), Y2

// Q6ACT: activation k's 32 quants of the chunk (tile order) times
// sign(w), against |w| (each word at most 2·32·127), scaled by (sa, sb)
// into the lanes acc.
#define Q6ACT(k, yoff, acc) \
	MOVQ (k*8)(R10), R13 \
	VMOVDQU yoff(R13)(DI*1), Y3 \
	VPSIGNB Y1, Y3, Y3 \
	VPMADDUBSW Y3, Y0, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VPADDD Y3, acc, acc

#define Q6CHUNK4(qloff, nibshift, qhoff, hshift, yoff, soff) \
	Q6W(qloff, nibshift, qhoff, hshift, soff) \
	Q6ACT(0, yoff, Y4) \
	Q6ACT(1, yoff, Y5) \
	Q6ACT(2, yoff, Y6) \
	Q6ACT(3, yoff, Y7)

#define Q6CHUNK8(qloff, nibshift, qhoff, hshift, yoff, soff) \
	Q6CHUNK4(qloff, nibshift, qhoff, hshift, yoff, soff) \
	Q6ACT(4, yoff, Y8) \
	Q6ACT(5, yoff, Y9) \
	Q6ACT(6, yoff, Y10) \
	Q6ACT(7, yoff, Y11)

// Q6CHUNKS runs the eight chunks of a super-block (Q6CHUNK's layout).
#define Q6CHUNKS(chunk) \
	chunk(0, 0, 128, 0, 0, 0) \
	chunk(32, 0, 128, 2, 32, 4) \
	chunk(0, 4, 128, 4, 64, 8) \
	chunk(32, 4, 128, 6, 96, 12) \
	chunk(64, 0, 160, 0, 128, 16) \
	chunk(96, 0, 160, 2, 160, 20) \
	chunk(64, 4, 160, 4, 192, 24) \
	chunk(96, 4, 160, 6, 224, 28)

// func q6KDot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)
//
// q6KDotAVX2 of one row with four activations (q: their QT): lanes[k]
// is what q6KDotAVX2 stores for activation k. nb > 0.
TEXT ·q6KDot4AVX2(SB), NOSPLIT, $48-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ lanes+32(FP), DX
	KINIT(4)

q6k4block:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	KDSCALE(0, 208, 32)
	KZERO
	Q6CHUNKS(Q6CHUNK4)
	KLANES(Y4, 0, 32)
	KLANES(Y5, 1, 32)
	KLANES(Y6, 2, 32)
	KLANES(Y7, 3, 32)
	KNEXT(210)
	JNE q6k4block

	VZEROUPPER
	RET

// func q6KDot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, lanes *[8][8]float32)
//
// q6KDot4AVX2 for eight activations.
TEXT ·q6KDot8AVX2(SB), NOSPLIT, $64-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ lanes+32(FP), DX
	KINIT(8)

q6k8block:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	KDSCALE(0, 208, 32)
	KDSCALE(1, 208, 32)
	KZERO
	Q6CHUNKS(Q6CHUNK8)
	KLANES(Y4, 0, 32)
	KLANES(Y5, 1, 32)
	KLANES(Y6, 2, 32)
	KLANES(Y7, 3, 32)
	KLANES(Y8, 4, 32)
	KLANES(Y9, 5, 32)
	KLANES(Y10, 6, 32)
	KLANES(Y11, 7, 32)
	KNEXT(210)
	JNE q6k8block

	VZEROUPPER
	RET

// The decode kernels: many weight rows (rowBytes apart) against one
// Q8_K activation (its QT), each row's whole result — the integer lanes
// as the tiles make them, the float lanes, the mins and the final lane
// sum — in registers, so a row costs neither a call nor a store and
// reload of its lanes. Each row gets q4KDotAVX2's (q6KDotAVX2's) float32
// operations in their order and then dotQ4K's (dotQ6K's) sum of the
// lanes, so each result is Dot's bit for bit.
//
// Registers: R8 the current row, AX rowBytes, R9 the rows left, DX the
// next result; per row SI the super-block, CX the blocks left, DI and BX
// its offsets in QT and D (b·256, b·4); R10, R11, R12 QT, D and Sums32;
// Y4 the integer lanes, Y5 the float lanes, X6 the row's sum.

#include "krows_amd64.h"

// ROWNEXT stores the row's sum and moves to the next row.
#define ROWNEXT \
	ROWSUM \
	ADDQ $4, DX \
	ADDQ AX, R8 \
	DECQ R9

// Q4ACT1 is Q4ACT for the one activation at R10.
#define Q4ACT1(yoff) \
	VPMADDUBSW yoff(R10)(DI*1), Y13, Y3 \
	VPMADDUBSW (yoff+32)(R10)(DI*1), Y1, Y12 \
	VPADDW Y12, Y3, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VPADDD Y3, Y4, Y4

// func q4KRowsAVX2(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)
//
// out[i] = dotQ4K(row i, the activation) for n > 0 rows of nb > 0
// super-blocks; q is the activation's QT.
TEXT ·q4KRowsAVX2(SB), NOSPLIT, $16-64
	MOVQ rows+0(FP), R8
	MOVQ rowBytes+8(FP), AX
	MOVQ n+16(FP), R9
	MOVQ q+24(FP), R10
	MOVQ d+32(FP), R11
	MOVQ sums32+40(FP), R12
	MOVQ out+56(FP), DX
	MOVL $0x0f0f0f0f, R13
	VMOVD R13, X15
	VPBROADCASTD X15, Y15

q4krow:
	MOVQ nb+48(FP), CX
	ROWSTART

q4krowblock:
	Q4SCALES
	// The mins term: summ exact, then sum -= float32(summ)·(dmin·D[b]).
	VPMADDWD (R12)(BX*4), X2, X0
	VPSHUFD $0x4E, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPADDD X1, X0, X0
	VCVTDQ2PS X0, X0
	MOVWLZX 2(SI), R13
	VMOVD R13, X14
	VCVTPH2PS X14, X14
	VMULSS (R11)(BX*1), X14, X14
	VMULSS X0, X14, X14
	VSUBSS X14, X6, X6
	VPXOR Y4, Y4, Y4
	Q4W(16, 0)
	Q4ACT1(0)
	Q4W(48, 4)
	Q4ACT1(64)
	Q4W(80, 8)
	Q4ACT1(128)
	Q4W(112, 12)
	Q4ACT1(192)
	ROWLANES(0)
	KNEXT(144)
	JNE q4krowblock

	ROWNEXT
	JNE q4krow

	VZEROUPPER
	RET

// Q6CHUNK1 is a Q6_K chunk (Q6W) against the one activation at R10.
#define Q6CHUNK1(qloff, nibshift, qhoff, hshift, yoff, soff) \
	Q6W(qloff, nibshift, qhoff, hshift, soff) \
	VMOVDQU yoff(R10)(DI*1), Y3 \
	VPSIGNB Y1, Y3, Y3 \
	VPMADDUBSW Y3, Y0, Y3 \
	VPMADDWD Y2, Y3, Y3 \
	VPADDD Y3, Y4, Y4

// func q6KRowsAVX2(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)
//
// out[i] = dotQ6K(row i, the activation), as q4KRowsAVX2 (sums32 is
// not read: Q6_K has no mins).
TEXT ·q6KRowsAVX2(SB), NOSPLIT, $32-64
	MOVQ rows+0(FP), R8
	MOVQ rowBytes+8(FP), AX
	MOVQ n+16(FP), R9
	MOVQ q+24(FP), R10
	MOVQ d+32(FP), R11
	MOVQ out+56(FP), DX
	MOVL $0x0f0f0f0f, R13
	VMOVD R13, X15
	VPBROADCASTD X15, Y15

q6krow:
	MOVQ nb+48(FP), CX
	ROWSTART

q6krowblock:
	VPMOVSXBW 192(SI), Y0
	VMOVDQU Y0, 0(SP)
	VPXOR Y4, Y4, Y4
	Q6CHUNKS(Q6CHUNK1)
	ROWLANES(208)
	KNEXT(210)
	JNE q6krowblock

	ROWNEXT
	JNE q6krow

	VZEROUPPER
	RET
