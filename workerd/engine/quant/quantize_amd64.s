#include "textflag.h"

// BCAST32 broadcasts the 32-bit constant c to the eight dwords of y.
#define BCAST32(c, y, x) \
	MOVL $c, AX \
	VMOVD AX, x \
	VPBROADCASTD x, y

// pickLow (VPSHUFB) moves the low byte of each dword of a 128-bit half
// to the half's first four bytes (Go's int8 conversion: truncation).
DATA pickLow<>+0(SB)/8, $0x808080800c080400
DATA pickLow<>+8(SB)/8, $0x8080808080808080
DATA pickLow<>+16(SB)/8, $0x808080800c080400
DATA pickLow<>+24(SB)/8, $0x8080808080808080
GLOBL pickLow<>(SB), RODATA|NOPTR, $32

// interleave (VPERMD) orders dwords 0, 4, 1, 5, 2, 6, 3, 7.
DATA interleave<>+0(SB)/8, $0x0000000400000000
DATA interleave<>+8(SB)/8, $0x0000000500000001
DATA interleave<>+16(SB)/8, $0x0000000600000002
DATA interleave<>+24(SB)/8, $0x0000000700000003
GLOBL interleave<>(SB), RODATA|NOPTR, $32

// Q8KQUANT rounds the eight floats at off(SI) to Q8_K quants at off/4(DI):
// ggml's nearest_int(iscale·v) (the float32 product, the magic-number
// addition, the mantissa bits), min 127, then truncated to int8.
#define Q8KQUANT(off) \
	VMULPS off(SI), Y6, Y4 \
	VADDPS Y14, Y4, Y4 \
	VPAND Y13, Y4, Y4 \
	VPSUBD Y12, Y4, Y4 \
	VPMINSD Y11, Y4, Y4 \
	VPSHUFB pickLow<>(SB), Y4, Y4 \
	VPERMD Y4, Y10, Y4 \
	VMOVQ X4, (off/4)(DI)

// Q8KSUMS puts eight 16-quant sums of the 128 quants at off(DI) into X
// (int16, in order): per 32 bytes VPMADDUBSW with ones and VPMADDWD
// with ones give four-quant sums, VPHADDD adds them per 16.
#define Q8KSUMS(off, sumoff) \
	VPMADDUBSW off(DI), Y9, Y0 \
	VPMADDWD Y8, Y0, Y0 \
	VPMADDUBSW (off+32)(DI), Y9, Y1 \
	VPMADDWD Y8, Y1, Y1 \
	VPMADDUBSW (off+64)(DI), Y9, Y2 \
	VPMADDWD Y8, Y2, Y2 \
	VPMADDUBSW (off+96)(DI), Y9, Y3 \
	VPMADDWD Y8, Y3, Y3 \
	VPHADDD Y1, Y0, Y0 \
	VPHADDD Y3, Y2, Y2 \
	VPHADDD Y2, Y0, Y0 \
	VPERMD Y0, Y10, Y0 \
	VEXTRACTI128 $1, Y0, X1 \
	VPACKSSDW X1, X0, X0 \
	VMOVDQU X0, sumoff(DX)

// func quantizeQ8KAVX2(x *float32, q *int8, d *float32, sums *int16, nb int)
//
// quantizeQ8_K (ggml's quantize_row_q8_K_ref) for nb > 0 blocks of 256,
// the same float32 operations per element: amax the largest |x| (NaNs
// ignored, as the scalar comparison ignores them), mx the first element
// of that magnitude, iscale = -127/mx, d = 1/iscale; a block with amax
// 0 gets zero quants, sums and d.
TEXT ·quantizeQ8KAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ sums+24(FP), DX
	MOVQ nb+32(FP), CX
	BCAST32(0x7fffffff, Y15, X15)
	BCAST32(0x4b400000, Y14, X14)
	BCAST32(0x007fffff, Y13, X13)
	BCAST32(0x00400000, Y12, X12)
	BCAST32(127, Y11, X11)
	BCAST32(0x01010101, Y9, X9)
	BCAST32(0x00010001, Y8, X8)
	VMOVDQU interleave<>(SB), Y10

q8kblock:
	// amax: VMAXPS keeps its second source when the first is NaN.
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	XORQ R8, R8

q8kmax:
	VANDPS (SI)(R8*4), Y15, Y4
	VMAXPS Y0, Y4, Y0
	VANDPS 32(SI)(R8*4), Y15, Y4
	VMAXPS Y1, Y4, Y1
	VANDPS 64(SI)(R8*4), Y15, Y4
	VMAXPS Y2, Y4, Y2
	VANDPS 96(SI)(R8*4), Y15, Y4
	VMAXPS Y3, Y4, Y3
	ADDQ $32, R8
	CMPQ R8, $256
	JLT q8kmax
	VMAXPS Y1, Y0, Y0
	VMAXPS Y3, Y2, Y2
	VMAXPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VXORPS X1, X1, X1
	VUCOMISS X1, X0
	JEQ q8kzero
	VBROADCASTSS X0, Y0

	// mx: the first element whose magnitude is amax.
	XORQ R8, R8

q8kfind:
	VANDPS (SI)(R8*4), Y15, Y4
	VCMPPS $0, Y0, Y4, Y4
	VMOVMSKPS Y4, AX
	TESTL AX, AX
	JNE q8kfound
	ADDQ $8, R8
	JMP q8kfind

q8kfound:
	BSFL AX, AX
	ADDQ AX, R8
	MOVL $0xc2fe0000, AX
	VMOVD AX, X6
	VDIVSS (SI)(R8*4), X6, X6
	MOVL $0x3f800000, AX
	VMOVD AX, X7
	VDIVSS X6, X7, X7
	VMOVSS X7, (BX)
	VBROADCASTSS X6, Y6
	Q8KQUANT(0)
	Q8KQUANT(32)
	Q8KQUANT(64)
	Q8KQUANT(96)
	Q8KQUANT(128)
	Q8KQUANT(160)
	Q8KQUANT(192)
	Q8KQUANT(224)
	Q8KQUANT(256)
	Q8KQUANT(288)
	Q8KQUANT(320)
	Q8KQUANT(352)
	Q8KQUANT(384)
	Q8KQUANT(416)
	Q8KQUANT(448)
	Q8KQUANT(480)
	Q8KQUANT(512)
	Q8KQUANT(544)
	Q8KQUANT(576)
	Q8KQUANT(608)
	Q8KQUANT(640)
	Q8KQUANT(672)
	Q8KQUANT(704)
	Q8KQUANT(736)
	Q8KQUANT(768)
	Q8KQUANT(800)
	Q8KQUANT(832)
	Q8KQUANT(864)
	Q8KQUANT(896)
	Q8KQUANT(928)
	Q8KQUANT(960)
	Q8KQUANT(992)
	Q8KSUMS(0, 0)
	Q8KSUMS(128, 16)
	JMP q8knext

q8kzero:
	VXORPS Y0, Y0, Y0
	VMOVDQU Y0, 0(DI)
	VMOVDQU Y0, 32(DI)
	VMOVDQU Y0, 64(DI)
	VMOVDQU Y0, 96(DI)
	VMOVDQU Y0, 128(DI)
	VMOVDQU Y0, 160(DI)
	VMOVDQU Y0, 192(DI)
	VMOVDQU Y0, 224(DI)
	VMOVDQU Y0, 0(DX)
	VMOVSS X0, (BX)

q8knext:
	ADDQ $1024, SI
	ADDQ $256, DI
	ADDQ $4, BX
	ADDQ $32, DX
	DECQ CX
	JNE q8kblock

	VZEROUPPER
	RET

// Q80QUANT rounds the eight floats at off(SI) to Q8_0 quants at
// off/4(DI): p = v·id in float32 (id broadcast in Y6), rounded half away
// from zero as math.Round does (|p| truncated, plus one where the exact
// fraction |p| - trunc|p| is at least 0.5; 0.5 in Y12, 1.0 in Y11, the
// magnitude mask in Y15), the sign of p put back (VPSIGND), truncated
// to int8.
#define Q80QUANT(off) \
	VMULPS off(SI), Y6, Y4 \
	VANDPS Y15, Y4, Y5 \
	VROUNDPS $3, Y5, Y7 \
	VSUBPS Y7, Y5, Y5 \
	VCMPPS $13, Y12, Y5, Y5 \
	VANDPS Y11, Y5, Y5 \
	VADDPS Y5, Y7, Y7 \
	VCVTTPS2DQ Y7, Y7 \
	VPSIGND Y4, Y7, Y7 \
	VPSHUFB pickLow<>(SB), Y7, Y7 \
	VPERMD Y7, Y10, Y7 \
	VMOVQ X7, (off/4)(DI)

// func quantizeQ8_0AVX2(x *float32, q *int8, d *float32, nb int) bool
//
// quantizeQ8_0 (ggml's quantize_row_q8_0_ref) for nb > 0 blocks of 32,
// the same float32 operations per element: amax the largest |x|,
// dd = amax/127, id = 1/dd (0 when dd is 0), d = dd rounded to F16
// (VCVTPS2PH, to nearest even as RoundF16), quants round(x·id). Returns
// false, having written part of q and d, if a block holds a NaN or an
// infinity (Go's max propagates NaNs, and the F16 NaN encoding differs):
// the caller then runs the portable kernel.
TEXT ·quantizeQ8_0AVX2(SB), NOSPLIT, $0-33
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ nb+24(FP), CX
	BCAST32(0x7fffffff, Y15, X15)
	BCAST32(0x3f000000, Y12, X12)
	BCAST32(0x3f800000, Y11, X11)
	BCAST32(0x7f800000, Y14, X14)
	BCAST32(0x42fe0000, Y13, X13)
	VMOVDQU interleave<>(SB), Y10

q80block:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VANDPS Y15, Y2, Y6
	VANDPS Y15, Y3, Y7
	// A NaN compares unordered with itself, and an infinity equals the
	// infinity mask: either sends the row to the portable kernel.
	VCMPPS $3, Y4, Y4, Y8
	VCMPPS $3, Y5, Y5, Y9
	VORPS Y9, Y8, Y8
	VCMPPS $3, Y6, Y6, Y9
	VORPS Y9, Y8, Y8
	VCMPPS $3, Y7, Y7, Y9
	VORPS Y9, Y8, Y8
	VMAXPS Y5, Y4, Y4
	VMAXPS Y7, Y6, Y6
	VMAXPS Y6, Y4, Y4
	VCMPPS $0, Y14, Y4, Y9
	VORPS Y9, Y8, Y8
	VMOVMSKPS Y8, AX
	TESTL AX, AX
	JNE q80bad
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0x4e, X4, X5
	VMAXPS X5, X4, X4
	VPERMILPS $0xb1, X4, X5
	VMAXPS X5, X4, X4
	VDIVSS X13, X4, X4
	VCVTPS2PH $0, X4, X5
	VCVTPH2PS X5, X5
	VMOVSS X5, (BX)
	VXORPS X6, X6, X6
	VUCOMISS X6, X4
	JEQ q80id
	VDIVSS X4, X11, X6

q80id:
	VBROADCASTSS X6, Y6
	Q80QUANT(0)
	Q80QUANT(32)
	Q80QUANT(64)
	Q80QUANT(96)
	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, BX
	DECQ CX
	JNE q80block
	MOVB $1, ret+32(FP)
	VZEROUPPER
	RET

q80bad:
	MOVB $0, ret+32(FP)
	VZEROUPPER
	RET
