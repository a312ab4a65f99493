#include "textflag.h"

// ADD4 adds the four float32 lanes of x to the low lane of acc one by
// one, lane 0 first, in registers.
#define ADD4(x, acc) \
	VADDSS x, acc, acc \
	VMOVSHDUP x, X10 \
	VADDSS X10, acc, acc \
	VMOVHLPS x, x, X10 \
	VADDSS X10, acc, acc \
	VPERMILPS $3, x, X10 \
	VADDSS X10, acc, acc

// Q8INT puts the eight int32 partial sums of one Q8_0 block's products
// into R: the weight block at woff(SI) (an F16 scale, then 32 int8
// quants), the activation's 32 quants at yoff(DI), Y7 sixteen-bit ones.
// |w| times y·sign(w) cannot saturate VPMADDUBSW: activations lie in
// [-127, 127], so a pair sums to at most 2·128·127 = 32512.
#define Q8INT(woff, yoff, R) \
	VMOVDQU woff+2(SI), Y12 \
	VPSIGNB Y12, Y12, Y13 \
	VMOVDQU yoff(DI), Y14 \
	VPSIGNB Y12, Y14, Y14 \
	VPMADDUBSW Y14, Y13, R \
	VPMADDWD Y7, R, R

// SCALE8 gathers the F16 scales of the eight blocks at SI into X9 (a
// 16-bit insert each) and converts them: Y9 = eight float32 scales.
#define SCALE8 \
	MOVWLZX 0(SI), AX \
	VMOVD AX, X9 \
	MOVWLZX 34(SI), AX \
	VPINSRW $1, AX, X9, X9 \
	MOVWLZX 68(SI), AX \
	VPINSRW $2, AX, X9, X9 \
	MOVWLZX 102(SI), AX \
	VPINSRW $3, AX, X9, X9 \
	MOVWLZX 136(SI), AX \
	VPINSRW $4, AX, X9, X9 \
	MOVWLZX 170(SI), AX \
	VPINSRW $5, AX, X9, X9 \
	MOVWLZX 204(SI), AX \
	VPINSRW $6, AX, X9, X9 \
	MOVWLZX 238(SI), AX \
	VPINSRW $7, AX, X9, X9 \
	VCVTPH2PS X9, Y9

// func q8_0DotAVX2(row *byte, q *int8, d *float32, nb int) float32
//
// ggml_vec_dot_q8_0_q8_0's reference over nb blocks: for each block in
// order, sumf += float32(sumi) * (dw * dx), in float32, where sumi is
// the exact int32 dot of the block's quants. Eight blocks at a time,
// the integer sums are reduced together (VPHADDD, exact), their terms
// computed side by side (each lane the same float32 operations as the
// scalar kernel) and stored, then added to sumf one by one in block
// order; the remaining blocks one at a time.
TEXT ·q8_0DotAVX2(SB), NOSPLIT, $0-36
	MOVQ row+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ nb+24(FP), CX
	MOVL $0x00010001, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	VXORPS X15, X15, X15
	CMPQ CX, $8
	JLT q8tail

q8group:
	Q8INT(0, 0, Y0)
	Q8INT(34, 32, Y1)
	Q8INT(68, 64, Y2)
	Q8INT(102, 96, Y3)
	Q8INT(136, 128, Y4)
	Q8INT(170, 160, Y5)
	Q8INT(204, 192, Y6)
	Q8INT(238, 224, Y8)
	// Pairwise sums until Y0 lane k is block k's total.
	VPHADDD Y1, Y0, Y0
	VPHADDD Y3, Y2, Y2
	VPHADDD Y5, Y4, Y4
	VPHADDD Y8, Y6, Y6
	VPHADDD Y2, Y0, Y0
	VPHADDD Y6, Y4, Y4
	VPERM2I128 $0x20, Y4, Y0, Y1
	VPERM2I128 $0x31, Y4, Y0, Y2
	VPADDD Y2, Y1, Y0
	VCVTDQ2PS Y0, Y0
	SCALE8
	VMULPS (BX), Y9, Y9
	VMULPS Y9, Y0, Y0
	ADD4(X0, X15)
	VEXTRACTF128 $1, Y0, X0
	ADD4(X0, X15)
	ADDQ $272, SI
	ADDQ $256, DI
	ADDQ $32, BX
	SUBQ $8, CX
	CMPQ CX, $8
	JGE q8group

q8tail:
	TESTQ CX, CX
	JEQ q8done

q8one:
	Q8INT(0, 0, Y0)
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4E, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xB1, X0, X1
	VPADDD X1, X0, X0
	VCVTDQ2PS X0, X0
	MOVWLZX 0(SI), AX
	VMOVD AX, X9
	VCVTPH2PS X9, X9
	VMULSS (BX), X9, X9
	VMULSS X9, X0, X0
	VADDSS X0, X15, X15
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $4, BX
	DECQ CX
	JNE q8one

q8done:
	VMOVSS X15, ret+32(FP)
	VZEROUPPER
	RET

// Q8TILE is activation k's part of a Q8_0 tile's group of four blocks:
// the weight quants in Y0-Y3, their magnitudes in Y4-Y7, the four weight
// scales in X14, Y13 sixteen-bit ones; the activation's quants at
// DI(its pointer in the array at R10), its block scales at BX(its
// pointer in the array at R11). Its four block terms, the scalar
// kernel's float32(sumi)·(dw·dx), go to 16k(SP).
#define Q8TILE(k) \
	MOVQ (k*8)(R10), R13 \
	VMOVDQU 0(R13)(DI*1), Y12 \
	VPSIGNB Y0, Y12, Y12 \
	VPMADDUBSW Y12, Y4, Y8 \
	VPMADDWD Y13, Y8, Y8 \
	VMOVDQU 32(R13)(DI*1), Y12 \
	VPSIGNB Y1, Y12, Y12 \
	VPMADDUBSW Y12, Y5, Y9 \
	VPMADDWD Y13, Y9, Y9 \
	VMOVDQU 64(R13)(DI*1), Y12 \
	VPSIGNB Y2, Y12, Y12 \
	VPMADDUBSW Y12, Y6, Y10 \
	VPMADDWD Y13, Y10, Y10 \
	VMOVDQU 96(R13)(DI*1), Y12 \
	VPSIGNB Y3, Y12, Y12 \
	VPMADDUBSW Y12, Y7, Y11 \
	VPMADDWD Y13, Y11, Y11 \
	VPHADDD Y9, Y8, Y8 \
	VPHADDD Y11, Y10, Y10 \
	VPHADDD Y10, Y8, Y8 \
	VEXTRACTI128 $1, Y8, X9 \
	VPADDD X9, X8, X8 \
	VCVTDQ2PS X8, X8 \
	MOVQ (k*8)(R11), R13 \
	VMULPS (R13)(BX*1), X14, X9 \
	VMULPS X9, X8, X8 \
	VMOVUPS X8, (16*k)(SP)

// Q8WEIGHTS loads a group of four weight blocks at SI: quants in Y0-Y3,
// magnitudes in Y4-Y7, scales converted into X14.
#define Q8WEIGHTS \
	VMOVDQU 2(SI), Y0 \
	VMOVDQU 36(SI), Y1 \
	VMOVDQU 70(SI), Y2 \
	VMOVDQU 104(SI), Y3 \
	VPSIGNB Y0, Y0, Y4 \
	VPSIGNB Y1, Y1, Y5 \
	VPSIGNB Y2, Y2, Y6 \
	VPSIGNB Y3, Y3, Y7 \
	MOVWLZX 0(SI), AX \
	VMOVD AX, X14 \
	MOVWLZX 34(SI), AX \
	VPINSRW $1, AX, X14, X14 \
	MOVWLZX 68(SI), AX \
	VPINSRW $2, AX, X14, X14 \
	MOVWLZX 102(SI), AX \
	VPINSRW $3, AX, X14, X14 \
	VCVTPH2PS X14, X14

// Q8SUMS transposes the block terms of four activations (rows of four
// blocks at off(SP)) to columns and adds them to sums (the four
// activations' running sums side by side): block 0's terms, then block
// 1's, ..., so each sum takes its terms in block order, the scalar
// kernel's additions. Uses Y0-Y7, free once a group's terms are made.
#define Q8SUMS(off, sums) \
	VMOVUPS off(SP), X0 \
	VMOVUPS (off+16)(SP), X1 \
	VMOVUPS (off+32)(SP), X2 \
	VMOVUPS (off+48)(SP), X3 \
	VUNPCKLPS X1, X0, X4 \
	VUNPCKHPS X1, X0, X5 \
	VUNPCKLPS X3, X2, X6 \
	VUNPCKHPS X3, X2, X7 \
	VMOVLHPS X6, X4, X0 \
	VMOVHLPS X4, X6, X1 \
	VMOVLHPS X7, X5, X2 \
	VMOVHLPS X5, X7, X3 \
	VADDPS X0, sums, sums \
	VADDPS X1, sums, sums \
	VADDPS X2, sums, sums \
	VADDPS X3, sums, sums

// Q8TILEINIT sets the constants and offsets of q8_0Dot4AVX2 and
// q8_0Dot8AVX2 (their arguments loaded).
#define Q8TILEINIT \
	MOVL $0x00010001, AX \
	VMOVD AX, X13 \
	VPBROADCASTD X13, Y13 \
	VXORPS X15, X15, X15 \
	XORQ DI, DI \
	XORQ BX, BX

#define Q8TILENEXT \
	ADDQ $136, SI \
	ADDQ $128, DI \
	ADDQ $16, BX \
	SUBQ $4, CX

// func q8_0Dot4AVX2(row *byte, nb int, q *[4]*int8, d *[4]*float32, out *[4]float32)
//
// q8_0DotAVX2 of one weight row with four activations (prefill's tile):
// each group of four weight blocks is loaded, made absolute and its
// scales converted once for the four, and the activations' block terms
// are added to their sums side by side (Q8SUMS). nb must be a positive
// multiple of 4. The results are q8_0DotAVX2's bit for bit.
TEXT ·q8_0Dot4AVX2(SB), NOSPLIT, $64-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	Q8TILEINIT

q8t4:
	Q8WEIGHTS
	Q8TILE(0)
	Q8TILE(1)
	Q8TILE(2)
	Q8TILE(3)
	Q8SUMS(0, X15)
	Q8TILENEXT
	JNE q8t4

	MOVQ out+32(FP), DX
	VMOVUPS X15, (DX)
	VZEROUPPER
	RET

// func q8_0Dot8AVX2(row *byte, nb int, q *[8]*int8, d *[8]*float32, out *[8]float32)
//
// q8_0Dot4AVX2 for eight activations; the sums of activations 4-7 are
// kept at 128(SP).
TEXT ·q8_0Dot8AVX2(SB), NOSPLIT, $144-40
	MOVQ row+0(FP), SI
	MOVQ nb+8(FP), CX
	MOVQ q+16(FP), R10
	MOVQ d+24(FP), R11
	Q8TILEINIT
	VMOVUPS X15, 128(SP)

q8t8:
	Q8WEIGHTS
	Q8TILE(0)
	Q8TILE(1)
	Q8TILE(2)
	Q8TILE(3)
	Q8TILE(4)
	Q8TILE(5)
	Q8TILE(6)
	Q8TILE(7)
	Q8SUMS(0, X15)
	VMOVUPS 128(SP), X14
	Q8SUMS(64, X14)
	VMOVUPS X14, 128(SP)
	Q8TILENEXT
	JNE q8t8

	MOVQ out+32(FP), DX
	VMOVUPS X15, (DX)
	VMOVUPS 128(SP), X15
	VMOVUPS X15, 16(DX)
	VZEROUPPER
	RET

// Q4CHUNK is one 64-element chunk of a Q4_K super-block (32 bytes of
// nibbles at qoff(SI): low nibbles one sub-block, high nibbles the next)
// against Q8_K activations at yoff(DI): products summed per lane
// (element index mod 8, as ggml's reference kernel groups them), scaled
// by the two sub-block scales (dword shuf of X12 = sa | sb<<16) and
// added to the integer lanes Y10. VPSHUFB with Y11 reorders both
// operands' bytes within each 16-byte half to 0,8,1,9,…,7,15, so
// VPMADDUBSW's adjacent pairs are elements of one lane; the halves'
// words are then added (lane l: four products, at most 4·15·127, no
// saturation). Exact integer arithmetic throughout.
#define Q4CHUNK(qoff, yoff, shuf) \
	VMOVDQU qoff(SI), Y0 \
	VPSHUFB Y11, Y0, Y0 \
	VPAND Y15, Y0, Y1 \
	VPSRLW $4, Y0, Y2 \
	VPAND Y15, Y2, Y2 \
	VMOVDQU yoff(DI), Y3 \
	VPSHUFB Y11, Y3, Y3 \
	VPMADDUBSW Y3, Y1, Y1 \
	VMOVDQU yoff+32(DI), Y4 \
	VPSHUFB Y11, Y4, Y4 \
	VPMADDUBSW Y4, Y2, Y2 \
	VEXTRACTI128 $1, Y1, X5 \
	VPADDW X5, X1, X1 \
	VEXTRACTI128 $1, Y2, X6 \
	VPADDW X6, X2, X2 \
	VPUNPCKLWD X2, X1, X6 \
	VPUNPCKHWD X2, X1, X7 \
	VINSERTI128 $1, X7, Y6, Y6 \
	VPSHUFD $shuf, X12, X9 \
	VPBROADCASTD X9, Y9 \
	VPMADDWD Y9, Y6, Y6 \
	VPADDD Y6, Y10, Y10

// lanePairs orders each 16 bytes as 0,8,1,9,…,7,15 (VPSHUFB).
DATA ·lanePairs+0(SB)/8, $0x0b030a0209010800
DATA ·lanePairs+8(SB)/8, $0x0f070e060d050c04
DATA ·lanePairs+16(SB)/8, $0x0b030a0209010800
DATA ·lanePairs+24(SB)/8, $0x0f070e060d050c04
GLOBL ·lanePairs(SB), RODATA|NOPTR, $32

// func q4KDotAVX2(row *byte, q8 *int8, d *float32, sums32 *int16, nb int, lanes *[8]float32) float32
//
// ggml_vec_dot_q4_K_q8_K's reference arithmetic over nb super-blocks
// (144 bytes: d, dmin, 12 bytes of six-bit scales and mins, 128 of
// nibbles): per block the integer lanes (Q4CHUNK ×4) are converted to
// float32, multiplied by d·D[b] and added to the float lanes, and
// dmin·D[b]·Σ Sums32[j]·min[j] is subtracted from a float32 sum that
// starts at 0. Returns that sum and stores the lanes; the caller adds
// the lanes to it in order (dotQ4K).
TEXT ·q4KDotAVX2(SB), NOSPLIT, $0-52
	MOVQ row+0(FP), SI
	MOVQ q8+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ sums32+24(FP), R8
	MOVQ nb+32(FP), CX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VMOVDQU ·lanePairs(SB), Y11
	VXORPS Y8, Y8, Y8
	VXORPS X13, X13, X13

q4kblock:
	// Scales and mins (ggml's utmp shuffle): scales 0-3 = u0 & 0x3f..,
	// scales 4-7 = (u2 & 0x0f..) | ((u0>>6) & 0x03..)<<4, mins 0-3 =
	// u1 & 0x3f.., mins 4-7 = ((u2>>4) & 0x0f..) | ((u1>>6) & 0x03..)<<4.
	MOVL 4(SI), R9
	MOVL 8(SI), R10
	MOVL 12(SI), R11
	MOVL R9, AX
	ANDL $0x3f3f3f3f, AX
	MOVL R9, DX
	SHRL $6, DX
	ANDL $0x03030303, DX
	SHLL $4, DX
	MOVL R11, R12
	ANDL $0x0f0f0f0f, R12
	ORL R12, DX
	VMOVD AX, X12
	VPINSRD $1, DX, X12, X12
	VPMOVZXBW X12, X12
	MOVL R10, AX
	ANDL $0x3f3f3f3f, AX
	MOVL R10, DX
	SHRL $6, DX
	ANDL $0x03030303, DX
	SHLL $4, DX
	MOVL R11, R12
	SHRL $4, R12
	ANDL $0x0f0f0f0f, R12
	ORL R12, DX
	VMOVD AX, X9
	VPINSRD $1, DX, X9, X9
	VPMOVZXBW X9, X9
	// Σ Sums32[j]·min[j], exact in int32, then the float32 sum.
	VMOVDQU (R8), X14
	VPMADDWD X14, X9, X9
	VPSHUFD $0x4E, X9, X14
	VPADDD X14, X9, X9
	VPSHUFD $0xB1, X9, X14
	VPADDD X14, X9, X9
	VCVTDQ2PS X9, X9
	MOVWLZX 2(SI), AX
	VMOVD AX, X14
	VCVTPH2PS X14, X14
	VMULSS (BX), X14, X14
	VMULSS X9, X14, X14
	VSUBSS X14, X13, X13

	VPXOR Y10, Y10, Y10
	Q4CHUNK(16, 0, 0x00)
	Q4CHUNK(48, 64, 0x55)
	Q4CHUNK(80, 128, 0xAA)
	Q4CHUNK(112, 192, 0xFF)
	VCVTDQ2PS Y10, Y10
	MOVWLZX 0(SI), AX
	VMOVD AX, X14
	VCVTPH2PS X14, X14
	VMULSS (BX), X14, X14
	VBROADCASTSS X14, Y14
	VMULPS Y14, Y10, Y10
	VADDPS Y10, Y8, Y8

	ADDQ $144, SI
	ADDQ $256, DI
	ADDQ $4, BX
	ADDQ $16, R8
	DECQ CX
	JNE q4kblock

	MOVQ lanes+40(FP), DX
	VMOVUPS Y8, (DX)
	VMOVSS X13, ret+48(FP)
	VZEROUPPER
	RET

// Q6CHUNK handles 32 elements of a Q6_K super-block (two 16-element
// sub-blocks, one per 128-bit half): nibbles from ql at qloff(SI)
// shifted right by nibshift, two high bits from the 32 qh bytes at (R8)
// shifted right by hshift, making quants q in [0, 64); activations at
// yoff(DI). VPSHUFB with Y12 reorders both to 0,8,1,9,…,7,15 within each
// half, so VPMADDUBSW's pairs are q[l]·y[l] + q[l+8]·y[l+8] and, with
// Y13's bytes of 32, 32·(y[l] + y[l+8]); their difference is ggml's
// reference lane l of the sub-block (no saturation: 2·63·127 < 32768).
// The two sub-blocks' lanes are interleaved and VPMADDWD applies their
// scales (the int16 pair at scoff(BX)), adding to the lanes Y10. Exact.
#define Q6CHUNK(qloff, nibshift, hshift, yoff, scoff) \
	VMOVDQU qloff(SI), Y0 \
	VPSRLW $nibshift, Y0, Y0 \
	VPAND Y15, Y0, Y0 \
	VMOVDQU (R8), Y1 \
	VPSRLW $hshift, Y1, Y1 \
	VPAND Y14, Y1, Y1 \
	VPSLLW $4, Y1, Y1 \
	VPOR Y1, Y0, Y0 \
	VPSHUFB Y12, Y0, Y0 \
	VMOVDQU yoff(DI), Y1 \
	VPSHUFB Y12, Y1, Y1 \
	VPMADDUBSW Y1, Y0, Y2 \
	VPMADDUBSW Y1, Y13, Y3 \
	VPSUBW Y3, Y2, Y2 \
	VEXTRACTI128 $1, Y2, X3 \
	VPUNPCKLWD X3, X2, X4 \
	VPUNPCKHWD X3, X2, X5 \
	VINSERTI128 $1, X5, Y4, Y4 \
	VPBROADCASTD scoff(BX), Y6 \
	VPMADDWD Y6, Y4, Y4 \
	VPADDD Y4, Y10, Y10

// func q6KDotAVX2(row *byte, q8 *int8, d *float32, nb int, lanes *[8]float32)
//
// ggml_vec_dot_q6_K_q8_K's reference arithmetic over nb super-blocks
// (210 bytes: ql[128], qh[64], 16 int8 scales, d): per block the integer
// lanes (Q6CHUNK ×8, the scales widened to int16 pairs on the stack) are
// converted to float32, multiplied by d·D[b] and added to the float
// lanes, which are stored for the caller to add in order (dotQ6K).
TEXT ·q6KDotAVX2(SB), NOSPLIT, $32-40
	MOVQ row+0(FP), SI
	MOVQ q8+8(FP), DI
	MOVQ d+16(FP), R9
	MOVQ nb+24(FP), CX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x03030303, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x20202020, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
	VMOVDQU ·lanePairs(SB), Y12
	VXORPS Y8, Y8, Y8
	LEAQ 0(SP), BX

q6kblock:
	VPMOVSXBW 192(SI), Y11
	VMOVDQU Y11, (BX)
	VPXOR Y10, Y10, Y10
	LEAQ 128(SI), R8
	Q6CHUNK(0, 0, 0, 0, 0)
	Q6CHUNK(32, 0, 2, 32, 4)
	Q6CHUNK(0, 4, 4, 64, 8)
	Q6CHUNK(32, 4, 6, 96, 12)
	LEAQ 160(SI), R8
	Q6CHUNK(64, 0, 0, 128, 16)
	Q6CHUNK(96, 0, 2, 160, 20)
	Q6CHUNK(64, 4, 4, 192, 24)
	Q6CHUNK(96, 4, 6, 224, 28)
	VCVTDQ2PS Y10, Y10
	MOVWLZX 208(SI), AX
	VMOVD AX, X11
	VCVTPH2PS X11, X11
	VMULSS (R9), X11, X11
	VBROADCASTSS X11, Y11
	VMULPS Y11, Y10, Y10
	VADDPS Y10, Y8, Y8

	ADDQ $210, SI
	ADDQ $256, DI
	ADDQ $4, R9
	DECQ CX
	JNE q6kblock

	MOVQ lanes+32(FP), DX
	VMOVUPS Y8, (DX)
	VZEROUPPER
	RET

// func dotF32AVX2(w *float32, x *float32, n int) float64
//
// Σ w[i]·x[i] for n a multiple of 16: products rounded to float32 (as
// the portable kernel's float32 multiply), summed in float64 over four
// accumulators.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11
	SHRQ $4, CX
	JEQ f32done

f32loop:
	VMOVUPS (SI), Y0
	VMULPS (DI), Y0, Y0
	VMOVUPS 32(SI), Y3
	VMULPS 32(DI), Y3, Y3
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y8, Y8
	VADDPD Y2, Y9, Y9
	VCVTPS2PD X3, Y4
	VEXTRACTF128 $1, Y3, X5
	VCVTPS2PD X5, Y5
	VADDPD Y4, Y10, Y10
	VADDPD Y5, Y11, Y11
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNE f32loop

f32done:
	VADDPD Y9, Y8, Y8
	VADDPD Y11, Y10, Y10
	VADDPD Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPD X9, X8, X8
	VPERMILPD $1, X8, X9
	VADDSD X9, X8, X8
	VMOVSD X8, ret+24(FP)
	VZEROUPPER
	RET

// func dotF16AVX2(w *uint16, x *float32, n int) float64
//
// As dotF32AVX2 with w in half precision (converted exactly by F16C).
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	VXORPD Y11, Y11, Y11
	SHRQ $4, CX
	JEQ f16done

f16loop:
	VCVTPH2PS (SI), Y0
	VMULPS (DI), Y0, Y0
	VCVTPH2PS 16(SI), Y3
	VMULPS 32(DI), Y3, Y3
	VCVTPS2PD X0, Y1
	VEXTRACTF128 $1, Y0, X2
	VCVTPS2PD X2, Y2
	VADDPD Y1, Y8, Y8
	VADDPD Y2, Y9, Y9
	VCVTPS2PD X3, Y4
	VEXTRACTF128 $1, Y3, X5
	VCVTPS2PD X5, Y5
	VADDPD Y4, Y10, Y10
	VADDPD Y5, Y11, Y11
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNE f16loop

f16done:
	VADDPD Y9, Y8, Y8
	VADDPD Y11, Y10, Y10
	VADDPD Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPD X9, X8, X8
	VPERMILPD $1, X8, X9
	VADDSD X9, X8, X8
	VMOVSD X8, ret+24(FP)
	VZEROUPPER
	RET
