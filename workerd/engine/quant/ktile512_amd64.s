#include "go_asm.h"
#include "textflag.h"

// The K-quant prefill tiles of ktile_amd64.s (one weight row against
// eight or four Q8_K activations) with AVX-512 (BW, VL, VBMI, VNNI) for
// the integer lanes. Each super-block's weights are put in tile order
// once for the tile by byte permutes (VPERMI2B, VPERMB), one 64-element
// chunk (Q4_K) or two 32-element chunks (Q6_K) per 512-bit register, so
// an activation costs one VPMADDUBSW and one VPDPWSSD (the sub-block
// scales applied and accumulated in one instruction) per 64 elements,
// and for Q6_K one VPXORD (its activations read as unsigned, T6BLOCK);
// each 256-bit half ends with eight integer lanes in order and the
// halves are added exactly. The integer lanes are the AVX2 tiles' (only
// grouped differently, which integer sums do not see) and every float
// operation is theirs, in their order and with their operand order, so
// each result is Dot's bit for bit. The float lanes and the mins stay in
// registers for the whole row, and the tiles of eight take all of a
// row's tiles in one call, reading the activations' slices from their
// Act structs and adding each activation's lanes to its result there
// (addLanes' operations): no Go between the tiles.
//
// Registers: SI the weight super-block, CX the blocks left, DI the
// offset of the super-block in each activation's QT (b·256), BX the
// offset of its scale D[b] (b·4), R10, R11, R12 the arrays of QT, D and
// Sums32 pointers, R13 and R14 scratch; in the tiles of four DX the
// lanes and AX the mins results, in those of eight (a row against all
// its activations' tiles) AX the next eight Act structs, DX their
// results, R8 the tiles left. Z4-Z7 products, Z8-Z15 activation k's
// integer lanes (k = 0..7), Y16-Y23 its float lanes, Y31 the mins sums
// (Q4_K), Z27-Z30 the super-block's weights in tile order, Z0-Z3 its
// scale pairs.

// q4Tile: from a Q4_K pair of chunks' 64 nibble bytes, lows in the
// first table (indices 0-63) and highs in the second (64-127), chunk 0
// (q4Tile+0) or chunk 1 (q4Tile+64) in tile order: per 32 bytes (16
// elements of each sub-block), lane l's elements l and l+8 of sub-block
// A (low nibbles), then of B (high nibbles).
DATA q4Tile<>+0(SB)/8, $0x4941090148400800
DATA q4Tile<>+8(SB)/8, $0x4b430b034a420a02
DATA q4Tile<>+16(SB)/8, $0x4d450d054c440c04
DATA q4Tile<>+24(SB)/8, $0x4f470f074e460e06
DATA q4Tile<>+32(SB)/8, $0x5951191158501810
DATA q4Tile<>+40(SB)/8, $0x5b531b135a521a12
DATA q4Tile<>+48(SB)/8, $0x5d551d155c541c14
DATA q4Tile<>+56(SB)/8, $0x5f571f175e561e16
DATA q4Tile<>+64(SB)/8, $0x6961292168602820
DATA q4Tile<>+72(SB)/8, $0x6b632b236a622a22
DATA q4Tile<>+80(SB)/8, $0x6d652d256c642c24
DATA q4Tile<>+88(SB)/8, $0x6f672f276e662e26
DATA q4Tile<>+96(SB)/8, $0x7971393178703830
DATA q4Tile<>+104(SB)/8, $0x7b733b337a723a32
DATA q4Tile<>+112(SB)/8, $0x7d753d357c743c34
DATA q4Tile<>+120(SB)/8, $0x7f773f377e763e36
GLOBL q4Tile<>(SB), RODATA|NOPTR, $128

// q6Tile (VPERMB) puts two Q6_K chunks' 32 quants each in tile order:
// per lane l, the chunk's elements l, l+8, l+16 and l+24.
DATA q6Tile<>+0(SB)/8, $0x1911090118100800
DATA q6Tile<>+8(SB)/8, $0x1b130b031a120a02
DATA q6Tile<>+16(SB)/8, $0x1d150d051c140c04
DATA q6Tile<>+24(SB)/8, $0x1f170f071e160e06
DATA q6Tile<>+32(SB)/8, $0x3931292138302820
DATA q6Tile<>+40(SB)/8, $0x3b332b233a322a22
DATA q6Tile<>+48(SB)/8, $0x3d352d253c342c24
DATA q6Tile<>+56(SB)/8, $0x3f372f273e362e26
GLOBL q6Tile<>(SB), RODATA|NOPTR, $64

// q6Up and q6Down: per-word shift counts that bring a Q6_K chunk's two
// high bits to bits 4-5 of each byte, for the two chunks of a pair (one
// per 256 bits) from the same 32 qh bytes: bits 0-1 and 2-3 up by 4 and
// 2, bits 4-5 and 6-7 down by 0 and 2.
DATA q6Up<>+0(SB)/8, $0x0004000400040004
DATA q6Up<>+8(SB)/8, $0x0004000400040004
DATA q6Up<>+16(SB)/8, $0x0004000400040004
DATA q6Up<>+24(SB)/8, $0x0004000400040004
DATA q6Up<>+32(SB)/8, $0x0002000200020002
DATA q6Up<>+40(SB)/8, $0x0002000200020002
DATA q6Up<>+48(SB)/8, $0x0002000200020002
DATA q6Up<>+56(SB)/8, $0x0002000200020002
GLOBL q6Up<>(SB), RODATA|NOPTR, $64
DATA q6Down<>+0(SB)/8, $0
DATA q6Down<>+8(SB)/8, $0
DATA q6Down<>+16(SB)/8, $0
DATA q6Down<>+24(SB)/8, $0
DATA q6Down<>+32(SB)/8, $0x0002000200020002
DATA q6Down<>+40(SB)/8, $0x0002000200020002
DATA q6Down<>+48(SB)/8, $0x0002000200020002
DATA q6Down<>+56(SB)/8, $0x0002000200020002
GLOBL q6Down<>(SB), RODATA|NOPTR, $64

// q6Pair0 (VPERMD): dword 0 of the widened scales (chunk 0's pair) in
// the first 256 bits, dword 1 in the second; adding 2p gives chunk pair
// p's.
DATA q6Pair0<>+0(SB)/8, $0
DATA q6Pair0<>+8(SB)/8, $0
DATA q6Pair0<>+16(SB)/8, $0
DATA q6Pair0<>+24(SB)/8, $0
DATA q6Pair0<>+32(SB)/8, $0x0000000100000001
DATA q6Pair0<>+40(SB)/8, $0x0000000100000001
DATA q6Pair0<>+48(SB)/8, $0x0000000100000001
DATA q6Pair0<>+56(SB)/8, $0x0000000100000001
GLOBL q6Pair0<>(SB), RODATA|NOPTR, $64

DATA q6Byte32<>+0(SB)/8, $0x2020202020202020
DATA q6Byte32<>+8(SB)/8, $0x2020202020202020
DATA q6Byte32<>+16(SB)/8, $0x2020202020202020
DATA q6Byte32<>+24(SB)/8, $0x2020202020202020
DATA q6Byte32<>+32(SB)/8, $0x2020202020202020
DATA q6Byte32<>+40(SB)/8, $0x2020202020202020
DATA q6Byte32<>+48(SB)/8, $0x2020202020202020
DATA q6Byte32<>+56(SB)/8, $0x2020202020202020
GLOBL q6Byte32<>(SB), RODATA|NOPTR, $64

DATA q6High<>+0(SB)/4, $0x30303030
GLOBL q6High<>(SB), RODATA|NOPTR, $4

// TDVEC4 gathers D[b] of activations 4g..4g+3 into x.
#define TDVEC4(g, x) \
	MOVQ (g*32)(R11), R13 \
	VMOVSS (R13)(BX*1), x \
	MOVQ (g*32+8)(R11), R13 \
	VINSERTPS $0x10, (R13)(BX*1), x, x \
	MOVQ (g*32+16)(R11), R13 \
	VINSERTPS $0x20, (R13)(BX*1), x, x \
	MOVQ (g*32+24)(R11), R13 \
	VINSERTPS $0x30, (R13)(BX*1), x, x

// TDVEC8 gathers D[b] of the eight activations into Y12.
#define TDVEC8 \
	TDVEC4(0, X12) \
	TDVEC4(1, X13) \
	VINSERTF128 $1, X13, Y12, Y12

// TF16 broadcasts the F16 scale at off(SI) as a float32 into y (xx
// its low part).
#define TF16(off, xx, y) \
	MOVWLZX off(SI), R13 \
	VMOVD R13, xx \
	VCVTPH2PS xx, xx \
	VBROADCASTSS xx, y

// TDSCALE stores dw·D[b] of every activation at 32(SP) (dw the F16
// scale at woff(SI), D[b] in r12: X12 or Y12; s: X14 or Y14), the
// products in the AVX2 tiles' operand order.
#define TDSCALE(woff, r12, s) \
	TF16(woff, X14, s) \
	VMULPS r12, s, s \
	VMOVUPS s, 32(SP)

// TFOLD adds activation k's integer lanes (the halves of Z, with y its
// low half) to its float lanes: float32(lanes)·(dw·D[b]), then the lanes
// plus that, the AVX2 tiles' KLANES operations and operand order.
#define TFOLD(z, y, k, lanes) \
	VEXTRACTI64X4 $1, z, Y4 \
	VPADDD Y4, y, y \
	VCVTDQ2PS y, y \
	VMULPS.BCST (32+4*k)(SP), y, y \
	VADDPS lanes, y, lanes

#define TFOLD4 \
	TFOLD(Z8, Y8, 0, Y16) \
	TFOLD(Z9, Y9, 1, Y17) \
	TFOLD(Z10, Y10, 2, Y18) \
	TFOLD(Z11, Y11, 3, Y19)

#define TFOLD8 \
	TFOLD4 \
	TFOLD(Z12, Y12, 4, Y20) \
	TFOLD(Z13, Y13, 5, Y21) \
	TFOLD(Z14, Y14, 6, Y22) \
	TFOLD(Z15, Y15, 7, Y23)

// TZERO zeroes the float lanes and the mins sums, and the offsets.
#define TZERO \
	VXORPS Y31, Y31, Y31 \
	VXORPS Y16, Y16, Y16 \
	VXORPS Y17, Y17, Y17 \
	VXORPS Y18, Y18, Y18 \
	VXORPS Y19, Y19, Y19 \
	VXORPS Y20, Y20, Y20 \
	VXORPS Y21, Y21, Y21 \
	VXORPS Y22, Y22, Y22 \
	VXORPS Y23, Y23, Y23 \
	XORQ DI, DI \
	XORQ BX, BX

// TSTORE4 stores the float lanes at DX ([4][8]float32).
#define TSTORE4 \
	VMOVUPS Y16, (DX) \
	VMOVUPS Y17, 32(DX) \
	VMOVUPS Y18, 64(DX) \
	VMOVUPS Y19, 96(DX)

// TSUM8 stores at DX each of the eight activations' result: start (its
// lane in s: the mins sums, or zeros) plus its float lanes 0 to 7 in
// order, addLanes' additions and operand order. The lanes Y16-Y23 (one
// activation each) are transposed so that each addition serves all
// eight activations: Y8+j holds lane j of every activation.
#define TSUM8(s) \
	VUNPCKLPS Y17, Y16, Y0 \
	VUNPCKHPS Y17, Y16, Y1 \
	VUNPCKLPS Y19, Y18, Y2 \
	VUNPCKHPS Y19, Y18, Y3 \
	VUNPCKLPS Y21, Y20, Y4 \
	VUNPCKHPS Y21, Y20, Y5 \
	VUNPCKLPS Y23, Y22, Y6 \
	VUNPCKHPS Y23, Y22, Y7 \
	VSHUFPS $0x44, Y2, Y0, Y8 \
	VSHUFPS $0xEE, Y2, Y0, Y9 \
	VSHUFPS $0x44, Y3, Y1, Y10 \
	VSHUFPS $0xEE, Y3, Y1, Y11 \
	VSHUFPS $0x44, Y6, Y4, Y12 \
	VSHUFPS $0xEE, Y6, Y4, Y13 \
	VSHUFPS $0x44, Y7, Y5, Y14 \
	VSHUFPS $0xEE, Y7, Y5, Y15 \
	VPERM2F128 $0x20, Y12, Y8, Y0 \
	VPERM2F128 $0x20, Y13, Y9, Y1 \
	VPERM2F128 $0x20, Y14, Y10, Y2 \
	VPERM2F128 $0x20, Y15, Y11, Y3 \
	VPERM2F128 $0x31, Y12, Y8, Y4 \
	VPERM2F128 $0x31, Y13, Y9, Y5 \
	VPERM2F128 $0x31, Y14, Y10, Y6 \
	VPERM2F128 $0x31, Y15, Y11, Y7 \
	VADDPS Y0, s, s \
	VADDPS Y1, s, s \
	VADDPS Y2, s, s \
	VADDPS Y3, s, s \
	VADDPS Y4, s, s \
	VADDPS Y5, s, s \
	VADDPS Y6, s, s \
	VADDPS Y7, s, s \
	VMOVUPS s, (DX)

// TACTS copies the QT, D and Sums32 data pointers of the eight
// activations at AX (Act structs) to the arrays at 64(SP), 128(SP) and
// 192(SP), which R10, R11 and R12 point at.
#define TACT(k) \
	MOVQ (k*Act__size+Act_QT)(AX), R13 \
	MOVQ R13, (64+8*k)(SP) \
	MOVQ (k*Act__size+Act_D)(AX), R13 \
	MOVQ R13, (128+8*k)(SP) \
	MOVQ (k*Act__size+Act_Sums32)(AX), R13 \
	MOVQ R13, (192+8*k)(SP)

#define TACTS \
	TACT(0) \
	TACT(1) \
	TACT(2) \
	TACT(3) \
	TACT(4) \
	TACT(5) \
	TACT(6) \
	TACT(7)

// TTILE starts a tile: the activations' pointers, the row's first
// super-block, the zeroed lanes and offsets.
#define TTILE \
	TACTS \
	MOVQ row+0(FP), SI \
	MOVQ nb+8(FP), CX \
	TZERO

// TNEXTTILE moves to the next eight activations and results.
#define TNEXTTILE \
	ADDQ $(8*Act__size), AX \
	ADDQ $32, DX \
	DECQ R8

#define TNEXT(size) \
	ADDQ $size, SI \
	ADDQ $256, DI \
	ADDQ $4, BX \
	DECQ CX

// T4SCALES decodes a Q4_K super-block's six-bit scales (ggml's
// get_scale_min_k4) to int16s at 0(SP), one dword pair (sa, sb) per
// 64-element chunk, and its mins to int16s in X2.
#define T4SCALES \
	MOVL 4(SI), R13 \
	MOVL 12(SI), R14 \
	ANDL $0x3f3f3f3f, R13 \
	VMOVD R13, X0 \
	MOVL 4(SI), R13 \
	SHRL $2, R13 \
	ANDL $0x30303030, R13 \
	ANDL $0x0f0f0f0f, R14 \
	ORL R14, R13 \
	VPINSRD $1, R13, X0, X0 \
	VPMOVZXBW X0, X0 \
	VMOVDQU X0, 0(SP) \
	MOVL 8(SI), R13 \
	ANDL $0x3f3f3f3f, R13 \
	VMOVD R13, X2 \
	MOVL 8(SI), R13 \
	SHRL $2, R13 \
	ANDL $0x30303030, R13 \
	MOVL 12(SI), R14 \
	SHRL $4, R14 \
	ANDL $0x0f0f0f0f, R14 \
	ORL R14, R13 \
	VPINSRD $1, R13, X2, X2 \
	VPMOVZXBW X2, X2

// T4SUMS loads activation k's eight Sums32 of the block into x and
// multiplies them by the mins (X2): four exact int32 partial sums.
#define T4SUMS(k, x) \
	MOVQ (k*8)(R12), R13 \
	VPMADDWD (R13)(BX*4), X2, x

// T4SUMS2 is T4SUMS for activations k (low half of y) and k+4 (high
// half) at once; X2's mins are in both halves of Y2.
#define T4SUMS2(k, x, y) \
	MOVQ (k*8)(R12), R13 \
	VMOVDQU (R13)(BX*4), x \
	MOVQ ((k+4)*8)(R12), R13 \
	VINSERTI128 $1, (R13)(BX*4), y, y \
	VPMADDWD Y2, y, y

// T4MINS subtracts the mins terms from the sums in r3 (X31 or Y31):
// summ (r8, exact) as float32 times dmin·D[b] (D[b] in r12), the AVX2
// tiles' operations and operand order.
#define T4MINS(r8, r12, r15, r3) \
	VCVTDQ2PS r8, r8 \
	TF16(2, X15, r15) \
	VMULPS r12, r15, r15 \
	VMULPS r8, r15, r8 \
	VSUBPS r8, r3, r3

// T4W puts the super-block's 256 weights in tile order: chunk c in
// Z27+c (lows, highs split, then permuted by the q4Tile tables in Z25
// and Z26; Z24 bytes of 0x0f), and chunk c's scale pair from 4c(SP) in
// every dword of Zc.
#define T4W \
	VMOVDQU64 16(SI), Z0 \
	VPSRLW $4, Z0, Z1 \
	VPANDD Z24, Z0, Z0 \
	VPANDD Z24, Z1, Z1 \
	VMOVDQA64 Z25, Z27 \
	VPERMI2B Z1, Z0, Z27 \
	VMOVDQA64 Z26, Z28 \
	VPERMI2B Z1, Z0, Z28 \
	VMOVDQU64 80(SI), Z0 \
	VPSRLW $4, Z0, Z1 \
	VPANDD Z24, Z0, Z0 \
	VPANDD Z24, Z1, Z1 \
	VMOVDQA64 Z25, Z29 \
	VPERMI2B Z1, Z0, Z29 \
	VMOVDQA64 Z26, Z30 \
	VPERMI2B Z1, Z0, Z30 \
	VPBROADCASTD 0(SP), Z0 \
	VPBROADCASTD 4(SP), Z1 \
	VPBROADCASTD 8(SP), Z2 \
	VPBROADCASTD 12(SP), Z3

// T4ACT: activation k's 256 quants of the block (QT) against the four
// chunks, each word (a lane's two products of one sub-block, at most
// 2·15·128) times its sub-block's scale (chunk c's pair in Zc), summed
// in acc.
#define T4ACT(k, acc) \
	MOVQ (k*8)(R10), R13 \
	VPMADDUBSW (R13)(DI*1), Z27, Z4 \
	VPMADDUBSW 64(R13)(DI*1), Z28, Z5 \
	VPMADDUBSW 128(R13)(DI*1), Z29, Z6 \
	VPMADDUBSW 192(R13)(DI*1), Z30, Z7 \
	VPMADDWD Z0, Z4, acc \
	VPDPWSSD Z1, Z5, acc \
	VPDPWSSD Z2, Z6, acc \
	VPDPWSSD Z3, Z7, acc

// T4INIT loads the constants.
#define T4INIT \
	MOVL $0x0f0f0f0f, R13 \
	VPBROADCASTD R13, Z24 \
	VMOVDQU64 q4Tile<>+0(SB), Z25 \
	VMOVDQU64 q4Tile<>+64(SB), Z26

// func q4KDot4AVX512(row *byte, nb int, q *[4]*int8, d *[4]*float32, sums32 *[4]*int16, lanes *[4][8]float32, mins *[4]float32)
//
// q4KDot4AVX2 with AVX-512 integer lanes. nb > 0.
TEXT ·q4KDot4AVX512(SB), NOSPLIT, $64-56
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ sums32+32(FP), R12
	MOVQ lanes+40(FP), DX
	MOVQ mins+48(FP), AX
	T4INIT
	TZERO

q4k4block512:
	T4SCALES
	TDVEC4(0, X12)
	TDSCALE(0, X12, X14)
	T4SUMS(0, X8)
	T4SUMS(1, X9)
	T4SUMS(2, X10)
	T4SUMS(3, X11)
	VPHADDD X9, X8, X8
	VPHADDD X11, X10, X10
	VPHADDD X10, X8, X8
	T4MINS(X8, X12, X15, X31)
	T4W
	T4ACT(0, Z8)
	T4ACT(1, Z9)
	T4ACT(2, Z10)
	T4ACT(3, Z11)
	TFOLD4
	TNEXT(144)
	JNE q4k4block512

	TSTORE4
	VMOVUPS X31, (AX)
	VZEROUPPER
	RET

// func q4KTiles8AVX512(row *byte, nb int, acts *Act, tiles int, out *float32)
//
// out[i] = dotQ4K(row, &acts[i]) for the 8·tiles > 0 activations at
// acts, eight at a time: q4KDot4AVX512's operations for eight
// activations, then addLanes' final sums. nb > 0, and every activation
// is prepared for the row's type and length with the tile order.
TEXT ·q4KTiles8AVX512(SB), NOSPLIT, $256-40
	MOVQ acts+16(FP), AX
	MOVQ tiles+24(FP), R8
	MOVQ out+32(FP), DX
	LEAQ 64(SP), R10
	LEAQ 128(SP), R11
	LEAQ 192(SP), R12
	T4INIT

q4ktile512:
	TTILE

q4k8block512:
	T4SCALES
	TDVEC8
	TDSCALE(0, Y12, Y14)
	VINSERTI128 $1, X2, Y2, Y2
	T4SUMS2(0, X8, Y8)
	T4SUMS2(1, X9, Y9)
	T4SUMS2(2, X10, Y10)
	T4SUMS2(3, X11, Y11)
	VPHADDD Y9, Y8, Y8
	VPHADDD Y11, Y10, Y10
	VPHADDD Y10, Y8, Y8
	T4MINS(Y8, Y12, Y15, Y31)
	T4W
	T4ACT(0, Z8)
	T4ACT(1, Z9)
	T4ACT(2, Z10)
	T4ACT(3, Z11)
	T4ACT(4, Z12)
	T4ACT(5, Z13)
	T4ACT(6, Z14)
	T4ACT(7, Z15)
	TFOLD8
	TNEXT(144)
	JNE q4k8block512

	TSUM8(Y31)
	TNEXTTILE
	JNE q4ktile512

	VZEROUPPER
	RET

// T6PAIR makes chunk pair p's 64 weights w = q-32 in tile order in wz:
// q's nibbles in Z6 (masked), its high bits from the qh bytes in both
// halves of Z5 shifted by the counts at counts (shift: VPSLLVW or
// VPSRLVW) and masked to bits 4-5.
#define T6PAIR(shift, counts, wz) \
	shift counts, Z5, Z4 \
	VPANDD.BCST q6High<>(SB), Z4, Z4 \
	VPORD Z4, Z6, Z6 \
	VPERMB Z6, Z25, Z6 \
	VPSUBB q6Byte32<>(SB), Z6, wz

// T6HALF makes the weights of the 128 elements with nibbles at
// qloff(SI) and high bits at qhoff(SI): chunk pairs 2h and 2h+1 in wa
// and wb (Z26 bytes of 0x0f).
#define T6HALF(qloff, qhoff, wa, wb) \
	VBROADCASTI64X4 qhoff(SI), Z5 \
	VMOVDQU64 qloff(SI), Z7 \
	VPANDD Z26, Z7, Z6 \
	T6PAIR(VPSLLVW, q6Up<>(SB), wa) \
	VPSRLW $4, Z7, Z6 \
	VPANDD Z26, Z6, Z6 \
	T6PAIR(VPSRLVW, q6Down<>(SB), wb)

// T6BLOCK prepares a Q6_K super-block for the activations: weights in
// Z27-Z30 (pair p in Z27+p), the scale pairs of pair p in Zp (VPERMD of
// the widened scales), and in Z31 minus the row's part of the offset
// activations' sums: the activations are read as y+128 (unsigned, for
// VPMADDUBSW against the signed weights), and Σ scale·w·(y+128) minus
// Σ scale·w·128 is exactly Σ scale·w·y. Each word is at most
// 2·255·32, the lanes stay far from overflow.
#define T6BLOCK \
	T6HALF(0, 128, Z27, Z28) \
	T6HALF(64, 160, Z29, Z30) \
	VPMOVSXBW 192(SI), Y4 \
	VMOVDQU64 q6Pair0<>(SB), Z0 \
	MOVL $2, R13 \
	VPBROADCASTD R13, Z5 \
	VPADDD Z5, Z0, Z1 \
	VPADDD Z5, Z1, Z2 \
	VPADDD Z5, Z2, Z3 \
	VPERMD Z4, Z0, Z0 \
	VPERMD Z4, Z1, Z1 \
	VPERMD Z4, Z2, Z2 \
	VPERMD Z4, Z3, Z3 \
	VPXORD Z31, Z31, Z31 \
	VPMADDUBSW Z27, Z24, Z4 \
	VPDPWSSD Z0, Z4, Z31 \
	VPMADDUBSW Z28, Z24, Z5 \
	VPDPWSSD Z1, Z5, Z31 \
	VPMADDUBSW Z29, Z24, Z6 \
	VPDPWSSD Z2, Z6, Z31 \
	VPMADDUBSW Z30, Z24, Z7 \
	VPDPWSSD Z3, Z7, Z31 \
	VPXORD Z4, Z4, Z4 \
	VPSUBD Z31, Z4, Z31

// T6ACT: activation k's 256 quants of the block (QT), offset by 128,
// against the four chunk pairs, times the scale pairs, into acc (which
// starts at Z31).
#define T6ACT(k, acc) \
	MOVQ (k*8)(R10), R13 \
	VMOVDQA64 Z31, acc \
	VPXORD (R13)(DI*1), Z24, Z4 \
	VPXORD 64(R13)(DI*1), Z24, Z5 \
	VPXORD 128(R13)(DI*1), Z24, Z6 \
	VPXORD 192(R13)(DI*1), Z24, Z7 \
	VPMADDUBSW Z27, Z4, Z4 \
	VPMADDUBSW Z28, Z5, Z5 \
	VPMADDUBSW Z29, Z6, Z6 \
	VPMADDUBSW Z30, Z7, Z7 \
	VPDPWSSD Z0, Z4, acc \
	VPDPWSSD Z1, Z5, acc \
	VPDPWSSD Z2, Z6, acc \
	VPDPWSSD Z3, Z7, acc

// T6INIT loads the constants (Z24 bytes of 0x80, Z25 the q6Tile
// permutation, Z26 bytes of 0x0f).
#define T6INIT \
	MOVL $0x80808080, R13 \
	VPBROADCASTD R13, Z24 \
	VMOVDQU64 q6Tile<>(SB), Z25 \
	MOVL $0x0f0f0f0f, R13 \
	VPBROADCASTD R13, Z26

// func q6KDot4AVX512(row *byte, nb int, q *[4]*int8, d *[4]*float32, lanes *[4][8]float32)
//
// q6KDot4AVX2 with AVX-512 integer lanes. nb > 0.
TEXT ·q6KDot4AVX512(SB), NOSPLIT, $64-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	MOVQ lanes+32(FP), DX
	T6INIT
	TZERO

q6k4block512:
	TDVEC4(0, X12)
	TDSCALE(208, X12, X14)
	T6BLOCK
	T6ACT(0, Z8)
	T6ACT(1, Z9)
	T6ACT(2, Z10)
	T6ACT(3, Z11)
	TFOLD4
	TNEXT(210)
	JNE q6k4block512

	TSTORE4
	VZEROUPPER
	RET

// func q6KTiles8AVX512(row *byte, nb int, acts *Act, tiles int, out *float32)
//
// out[i] = dotQ6K(row, &acts[i]), as q4KTiles8AVX512.
TEXT ·q6KTiles8AVX512(SB), NOSPLIT, $256-40
	MOVQ acts+16(FP), AX
	MOVQ tiles+24(FP), R8
	MOVQ out+32(FP), DX
	LEAQ 64(SP), R10
	LEAQ 128(SP), R11
	T6INIT

q6ktile512:
	TTILE

q6k8block512:
	TDVEC8
	TDSCALE(208, Y12, Y14)
	T6BLOCK
	T6ACT(0, Z8)
	T6ACT(1, Z9)
	T6ACT(2, Z10)
	T6ACT(3, Z11)
	T6ACT(4, Z12)
	T6ACT(5, Z13)
	T6ACT(6, Z14)
	T6ACT(7, Z15)
	TFOLD8
	TNEXT(210)
	JNE q6k8block512

	VXORPS Y31, Y31, Y31
	TSUM8(Y31)
	TNEXTTILE
	JNE q6ktile512

	VZEROUPPER
	RET
