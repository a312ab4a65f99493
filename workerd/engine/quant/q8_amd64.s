#include "textflag.h"

// func blockDotsQ8_0AVX2(row *byte, q *int8, nb int, out *int32)
//
// For each of nb Q8_0 blocks (34 bytes: an f16 scale, then 32 int8
// quants) at row and 32 int8 activation quants at q, writes the exact
// int32 sum of the 32 products to out. |x| times y·sign(x) with
// VPMADDUBSW cannot saturate: activations lie in [-127, 127], so a pair
// sums to at most 2·128·127 = 32512.
TEXT ·blockDotsQ8_0AVX2(SB), NOSPLIT, $0-32
	MOVQ row+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ nb+16(FP), CX
	MOVQ out+24(FP), DX
	MOVL $0x00010001, AX
	VMOVD AX, X7
	VPBROADCASTD X7, Y7
	TESTQ CX, CX
	JEQ done

loop:
	VMOVDQU 2(SI), Y0
	VMOVDQU (DI), Y1
	VPSIGNB Y0, Y0, Y2
	VPSIGNB Y0, Y1, Y3
	VPMADDUBSW Y3, Y2, Y4
	VPMADDWD Y7, Y4, Y5
	VEXTRACTI128 $1, Y5, X6
	VPADDD X6, X5, X5
	VPSHUFD $0x4E, X5, X6
	VPADDD X6, X5, X5
	VPSHUFD $0xB1, X5, X6
	VPADDD X6, X5, X5
	VMOVD X5, AX
	MOVL AX, (DX)
	ADDQ $34, SI
	ADDQ $32, DI
	ADDQ $4, DX
	DECQ CX
	JNE loop

done:
	VZEROUPPER
	RET

// func q4KLanesAVX2(qs *byte, q8 *int8, scales *uint32, aux *int32)
//
// One Q4_K super-block against Q8_K activations: for each of the four
// 64-element chunks (32 bytes of nibbles; low nibbles are one sub-block,
// high nibbles the next), the products summed per lane (element index
// mod 8, as ggml's reference kernel groups them) and scaled by the
// sub-block scales (scales[j] = sa | sb<<16), accumulated into aux[0:8].
// Every step is exact integer arithmetic: a nibble times an activation
// is at most 15·127, four of them fit in 16 bits.
TEXT ·q4KLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ qs+0(FP), SI
	MOVQ q8+8(FP), DI
	MOVQ scales+16(FP), BX
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	VPXOR Y10, Y10, Y10
	MOVQ $4, CX

chunk:
	VMOVDQU (SI), Y0
	VPAND Y15, Y0, Y1
	VPSRLW $4, Y0, Y2
	VPAND Y15, Y2, Y2
	VEXTRACTI128 $1, Y1, X3
	VPMOVZXBW X1, Y4
	VPMOVZXBW X3, Y5
	VPMOVSXBW (DI), Y6
	VPMOVSXBW 16(DI), Y7
	VPMULLW Y6, Y4, Y4
	VPMULLW Y7, Y5, Y5
	VPADDW Y5, Y4, Y4
	VEXTRACTI128 $1, Y4, X5
	VPADDW X5, X4, X4
	VEXTRACTI128 $1, Y2, X3
	VPMOVZXBW X2, Y5
	VPMOVZXBW X3, Y6
	VPMOVSXBW 32(DI), Y7
	VPMOVSXBW 48(DI), Y8
	VPMULLW Y7, Y5, Y5
	VPMULLW Y8, Y6, Y6
	VPADDW Y6, Y5, Y5
	VEXTRACTI128 $1, Y5, X6
	VPADDW X6, X5, X5
	VPUNPCKLWD X5, X4, X6
	VPUNPCKHWD X5, X4, X7
	VINSERTI128 $1, X7, Y6, Y6
	VPBROADCASTD (BX), Y8
	VPMADDWD Y8, Y6, Y6
	VPADDD Y6, Y10, Y10
	ADDQ $32, SI
	ADDQ $64, DI
	ADDQ $4, BX
	DECQ CX
	JNE chunk

	VMOVDQU Y10, (DX)
	VZEROUPPER
	RET

// Q6CHUNK handles 32 elements of a Q6_K super-block: nibbles from ql at
// qloff shifted by nibshift, two high bits from qh shifted by hshift,
// activations at yoff, and the scale pair of their two 16-element
// sub-blocks at scoff.
#define Q6CHUNK(qloff, nibshift, hshift, yoff, scoff) \
	VMOVDQU qloff(SI), Y0 \
	VPSRLW $nibshift, Y0, Y0 \
	VPAND Y15, Y0, Y0 \
	VMOVDQU (R8), Y1 \
	VPSRLW $hshift, Y1, Y1 \
	VPAND Y14, Y1, Y1 \
	VPSLLW $4, Y1, Y1 \
	VPOR Y1, Y0, Y0 \
	VEXTRACTI128 $1, Y0, X1 \
	VPMOVZXBW X0, Y2 \
	VPMOVZXBW X1, Y3 \
	VPSUBW Y13, Y2, Y2 \
	VPSUBW Y13, Y3, Y3 \
	VPMOVSXBW yoff(DI), Y4 \
	VPMOVSXBW yoff+16(DI), Y5 \
	VPMULLW Y4, Y2, Y2 \
	VPMULLW Y5, Y3, Y3 \
	VEXTRACTI128 $1, Y2, X4 \
	VPADDW X4, X2, X2 \
	VEXTRACTI128 $1, Y3, X5 \
	VPADDW X5, X3, X3 \
	VPUNPCKLWD X3, X2, X4 \
	VPUNPCKHWD X3, X2, X5 \
	VINSERTI128 $1, X5, Y4, Y4 \
	VPBROADCASTD scoff(BX), Y6 \
	VPMADDWD Y6, Y4, Y4 \
	VPADDD Y4, Y10, Y10

// func q6KLanesAVX2(blk *byte, q8 *int8, scales *uint32, aux *int32)
//
// One Q6_K super-block (ql[128], qh[64], ...) against Q8_K activations:
// products summed per lane (element index mod 8) within each 16-element
// sub-block, scaled by the sub-block's signed scale (scales[i] = the
// scales of sub-blocks 2i and 2i+1 as int16 halves), accumulated into
// aux[0:8] — the integers ggml's reference kernel computes.
TEXT ·q6KLanesAVX2(SB), NOSPLIT, $0-32
	MOVQ blk+0(FP), SI
	MOVQ q8+8(FP), DI
	MOVQ scales+16(FP), BX
	MOVQ aux+24(FP), DX
	MOVL $0x0f0f0f0f, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15
	MOVL $0x03030303, AX
	VMOVD AX, X14
	VPBROADCASTD X14, Y14
	MOVL $0x00200020, AX
	VMOVD AX, X13
	VPBROADCASTD X13, Y13
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
	VMOVDQU Y10, (DX)
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
