#include "textflag.h"

// The decode kernels of ktile_amd64.s (q4KRowsAVX2, q6KRowsAVX2) with
// AVX-512 (BW, VBMI, VNNI) for the integer lanes: two chunks of a
// super-block in one 512-bit register, the weights put in tile order by
// one byte permutation (VPERMI2B, VPERMB) instead of a chain of
// shuffles, and VPDPWSSD applying the sub-block scales and accumulating
// in one instruction. Each 256-bit half ends with eight integer lanes in
// order (one chunk's); the halves are added, exactly, to the lanes the
// AVX2 kernels make, and the float operations that follow are theirs
// (the same macros), so each result is Dot's bit for bit.
//
// Registers as in the AVX2 decode kernels: R8 the row, AX rowBytes, R9
// the rows left, DX the next result, SI the super-block, CX the blocks
// left, DI and BX the offsets in QT and D, R10 QT, R11 D, R12 Sums32;
// Z4 the integer lanes, Y5 the float lanes, X6 the row's sum; Z16 up
// the constants.

// q4RowA (q4RowB) takes the first (second) 64-element chunk of 64
// bytes of nibbles, lows in one table (indices 0-63) and highs in the
// other (64-127), to tile order: per 32 bytes, for each lane l, A's
// elements l and l+8 (low nibbles), then B's (high nibbles).
DATA q4RowA<>+0(SB)/8, $0x4941090148400800
DATA q4RowA<>+8(SB)/8, $0x4b430b034a420a02
DATA q4RowA<>+16(SB)/8, $0x4d450d054c440c04
DATA q4RowA<>+24(SB)/8, $0x4f470f074e460e06
DATA q4RowA<>+32(SB)/8, $0x5951191158501810
DATA q4RowA<>+40(SB)/8, $0x5b531b135a521a12
DATA q4RowA<>+48(SB)/8, $0x5d551d155c541c14
DATA q4RowA<>+56(SB)/8, $0x5f571f175e561e16
GLOBL q4RowA<>(SB), RODATA|NOPTR, $64
DATA q4RowB<>+0(SB)/8, $0x6961292168602820
DATA q4RowB<>+8(SB)/8, $0x6b632b236a622a22
DATA q4RowB<>+16(SB)/8, $0x6d652d256c642c24
DATA q4RowB<>+24(SB)/8, $0x6f672f276e662e26
DATA q4RowB<>+32(SB)/8, $0x7971393178703830
DATA q4RowB<>+40(SB)/8, $0x7b733b337a723a32
DATA q4RowB<>+48(SB)/8, $0x7d753d357c743c34
DATA q4RowB<>+56(SB)/8, $0x7f773f377e763e36
GLOBL q4RowB<>(SB), RODATA|NOPTR, $64

// q6RowPerm puts two Q6_K chunks' quants (32 each) in tile order: per
// lane l, elements l, l+8, l+16, l+24 of the chunk.
DATA q6RowPerm<>+0(SB)/8, $0x1911090118100800
DATA q6RowPerm<>+8(SB)/8, $0x1b130b031a120a02
DATA q6RowPerm<>+16(SB)/8, $0x1d150d051c140c04
DATA q6RowPerm<>+24(SB)/8, $0x1f170f071e160e06
DATA q6RowPerm<>+32(SB)/8, $0x3931292138302820
DATA q6RowPerm<>+40(SB)/8, $0x3b332b233a322a22
DATA q6RowPerm<>+48(SB)/8, $0x3d352d253c342c24
DATA q6RowPerm<>+56(SB)/8, $0x3f372f273e362e26
GLOBL q6RowPerm<>(SB), RODATA|NOPTR, $64

// q6HighShift: word shifts that bring the two high bits of the low
// (high) chunk of a pair, at bits 0-1 (2-3) or 4-5 (6-7) of each qh
// byte, to bits 4-5: left by 4 and 2 (q6HighShift+0), right by 0 and 2
// (q6HighShift+64), each for the pair's first, then second, 256 bits.
DATA q6HighShift<>+0(SB)/8, $0x0004000400040004
DATA q6HighShift<>+8(SB)/8, $0x0004000400040004
DATA q6HighShift<>+16(SB)/8, $0x0004000400040004
DATA q6HighShift<>+24(SB)/8, $0x0004000400040004
DATA q6HighShift<>+32(SB)/8, $0x0002000200020002
DATA q6HighShift<>+40(SB)/8, $0x0002000200020002
DATA q6HighShift<>+48(SB)/8, $0x0002000200020002
DATA q6HighShift<>+56(SB)/8, $0x0002000200020002
DATA q6HighShift<>+64(SB)/8, $0x0000000000000000
DATA q6HighShift<>+72(SB)/8, $0x0000000000000000
DATA q6HighShift<>+80(SB)/8, $0x0000000000000000
DATA q6HighShift<>+88(SB)/8, $0x0000000000000000
DATA q6HighShift<>+96(SB)/8, $0x0002000200020002
DATA q6HighShift<>+104(SB)/8, $0x0002000200020002
DATA q6HighShift<>+112(SB)/8, $0x0002000200020002
DATA q6HighShift<>+120(SB)/8, $0x0002000200020002
GLOBL q6HighShift<>(SB), RODATA|NOPTR, $128

// q6ScalePairs (VPERMD): chunk pair p's two scale pairs, dword 2p
// across the first 256 bits and 2p+1 across the second, p = 0..3.
DATA q6ScalePairs<>+0(SB)/8, $0x0000000000000000
DATA q6ScalePairs<>+8(SB)/8, $0x0000000000000000
DATA q6ScalePairs<>+16(SB)/8, $0x0000000000000000
DATA q6ScalePairs<>+24(SB)/8, $0x0000000000000000
DATA q6ScalePairs<>+32(SB)/8, $0x0000000100000001
DATA q6ScalePairs<>+40(SB)/8, $0x0000000100000001
DATA q6ScalePairs<>+48(SB)/8, $0x0000000100000001
DATA q6ScalePairs<>+56(SB)/8, $0x0000000100000001
DATA q6ScalePairs<>+64(SB)/8, $0x0000000200000002
DATA q6ScalePairs<>+72(SB)/8, $0x0000000200000002
DATA q6ScalePairs<>+80(SB)/8, $0x0000000200000002
DATA q6ScalePairs<>+88(SB)/8, $0x0000000200000002
DATA q6ScalePairs<>+96(SB)/8, $0x0000000300000003
DATA q6ScalePairs<>+104(SB)/8, $0x0000000300000003
DATA q6ScalePairs<>+112(SB)/8, $0x0000000300000003
DATA q6ScalePairs<>+120(SB)/8, $0x0000000300000003
DATA q6ScalePairs<>+128(SB)/8, $0x0000000400000004
DATA q6ScalePairs<>+136(SB)/8, $0x0000000400000004
DATA q6ScalePairs<>+144(SB)/8, $0x0000000400000004
DATA q6ScalePairs<>+152(SB)/8, $0x0000000400000004
DATA q6ScalePairs<>+160(SB)/8, $0x0000000500000005
DATA q6ScalePairs<>+168(SB)/8, $0x0000000500000005
DATA q6ScalePairs<>+176(SB)/8, $0x0000000500000005
DATA q6ScalePairs<>+184(SB)/8, $0x0000000500000005
DATA q6ScalePairs<>+192(SB)/8, $0x0000000600000006
DATA q6ScalePairs<>+200(SB)/8, $0x0000000600000006
DATA q6ScalePairs<>+208(SB)/8, $0x0000000600000006
DATA q6ScalePairs<>+216(SB)/8, $0x0000000600000006
DATA q6ScalePairs<>+224(SB)/8, $0x0000000700000007
DATA q6ScalePairs<>+232(SB)/8, $0x0000000700000007
DATA q6ScalePairs<>+240(SB)/8, $0x0000000700000007
DATA q6ScalePairs<>+248(SB)/8, $0x0000000700000007
GLOBL q6ScalePairs<>(SB), RODATA|NOPTR, $256

#include "krows_amd64.h"

// ROWFOLD folds Z4's halves into the block's eight integer lanes Y4,
// then ROWLANES adds them to the float lanes.
#define ROWFOLD(woff) \
	VEXTRACTI64X4 $1, Z4, Y0 \
	VPADDD Y0, Y4, Y4 \
	ROWLANES(woff)

#define ROWNEXT(size) \
	ADDQ $size, SI \
	ADDQ $256, DI \
	ADDQ $4, BX \
	DECQ CX

// Q4PAIR is chunks 2g and 2g+1 of a Q4_K super-block: their 64 bytes
// of nibbles at qoff(SI) split into lows and highs and permuted to tile
// order (Z2: chunk 2g, Z3: chunk 2g+1), against the activation's 128
// quants at yoff in QT; each word (a lane's two products of one
// sub-block, at most 2·15·127) times its sub-block's scale, the chunk's
// scale pair at soff(SP), into Z4.
#define Q4PAIR(qoff, yoff, soff) \
	VMOVDQU64 qoff(SI), Z0 \
	VPSRLW $4, Z0, Z1 \
	VPANDD Z16, Z0, Z0 \
	VPANDD Z16, Z1, Z1 \
	VMOVDQA64 Z17, Z2 \
	VPERMI2B Z1, Z0, Z2 \
	VMOVDQA64 Z18, Z3 \
	VPERMI2B Z1, Z0, Z3 \
	VPMADDUBSW yoff(R10)(DI*1), Z2, Z2 \
	VPMADDUBSW (yoff+64)(R10)(DI*1), Z3, Z3 \
	VPDPWSSD.BCST soff(SP), Z2, Z4 \
	VPDPWSSD.BCST (soff+4)(SP), Z3, Z4

// func q4KRowsAVX512(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)
//
// q4KRowsAVX2 with AVX-512 integer lanes.
TEXT ·q4KRowsAVX512(SB), NOSPLIT, $16-64
	MOVQ rows+0(FP), R8
	MOVQ rowBytes+8(FP), AX
	MOVQ n+16(FP), R9
	MOVQ q+24(FP), R10
	MOVQ d+32(FP), R11
	MOVQ sums32+40(FP), R12
	MOVQ out+56(FP), DX
	MOVL $0x0f0f0f0f, R13
	VPBROADCASTD R13, Z16
	VMOVDQU64 q4RowA<>(SB), Z17
	VMOVDQU64 q4RowB<>(SB), Z18

q4krow512:
	MOVQ nb+48(FP), CX
	ROWSTART

q4kblock512:
	// Scales (words at 0(SP)) and mins (X2), as Q4SCALES.
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
	VPXORD Z4, Z4, Z4
	Q4PAIR(16, 0, 0)
	Q4PAIR(80, 128, 8)
	ROWFOLD(0)
	ROWNEXT(144)
	JNE q4kblock512

	ROWSUM
	ADDQ $4, DX
	ADDQ AX, R8
	DECQ R9
	JNE q4krow512

	VZEROUPPER
	RET

// Q6PAIR is chunk pair p of a Q6_K super-block: the quants q in [0, 64)
// made of the nibbles (Z0, already masked) and the high bits (qh in
// both halves of Z9, shifted by the counts shift and masked to bits
// 4-5 by Z17), permuted to tile order, against the activation's 64
// quants at yoff in QT: q·y pairs minus 32·y pairs (Z18: bytes of 32)
// are ggml's pairs of (q-32)·y (at most 2·63·127 + 2·32·127 in
// magnitude: no saturation), times the scale pairs (VPERMD of the
// widened scales in Z8, by the indices at pairs) into Z4; counts are
// the shift counts.
#define Q6PAIR(shift, counts, yoff, pairs) \
	shift counts, Z9, Z1 \
	VPANDD Z17, Z1, Z1 \
	VPORD Z1, Z0, Z0 \
	VPERMB Z0, Z21, Z0 \
	VMOVDQU64 yoff(R10)(DI*1), Z2 \
	VPMADDUBSW Z2, Z0, Z0 \
	VPMADDUBSW Z2, Z18, Z2 \
	VPSUBW Z2, Z0, Z0 \
	VMOVDQU64 pairs, Z3 \
	VPERMD Z8, Z3, Z3 \
	VPDPWSSD Z3, Z0, Z4

// Q6HALF is the 128 elements of a Q6_K super-block with nibbles at
// qloff(SI) and high bits at qhoff(SI): chunk pairs 2h and 2h+1 (their
// scale indices at pairs1 and pairs2).
#define Q6HALF(qloff, qhoff, yoff, pairs1, pairs2) \
	VBROADCASTI64X4 qhoff(SI), Z9 \
	VMOVDQU64 qloff(SI), Z10 \
	VPANDD Z16, Z10, Z0 \
	Q6PAIR(VPSLLVW, q6HighShift<>+0(SB), yoff, pairs1) \
	VPSRLW $4, Z10, Z0 \
	VPANDD Z16, Z0, Z0 \
	Q6PAIR(VPSRLVW, q6HighShift<>+64(SB), (yoff+64), pairs2)

// func q6KRowsAVX512(rows *byte, rowBytes int, n int, q *int8, d *float32, sums32 *int16, nb int, out *float32)
//
// q6KRowsAVX2 with AVX-512 integer lanes.
TEXT ·q6KRowsAVX512(SB), NOSPLIT, $0-64
	MOVQ rows+0(FP), R8
	MOVQ rowBytes+8(FP), AX
	MOVQ n+16(FP), R9
	MOVQ q+24(FP), R10
	MOVQ d+32(FP), R11
	MOVQ out+56(FP), DX
	MOVL $0x0f0f0f0f, R13
	VPBROADCASTD R13, Z16
	MOVL $0x30303030, R13
	VPBROADCASTD R13, Z17
	MOVL $0x20202020, R13
	VPBROADCASTD R13, Z18
	VMOVDQU64 q6RowPerm<>(SB), Z21

q6krow512:
	MOVQ nb+48(FP), CX
	ROWSTART

q6kblock512:
	VPMOVSXBW 192(SI), Y8
	VPXORD Z4, Z4, Z4
	Q6HALF(0, 128, 0, q6ScalePairs<>+0(SB), q6ScalePairs<>+64(SB))
	Q6HALF(64, 160, 128, q6ScalePairs<>+128(SB), q6ScalePairs<>+192(SB))
	ROWFOLD(208)
	ROWNEXT(210)
	JNE q6kblock512

	ROWSUM
	ADDQ $4, DX
	ADDQ AX, R8
	DECQ R9
	JNE q6krow512

	VZEROUPPER
	RET
