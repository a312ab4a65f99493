#include "textflag.h"

// func axpyF16RowsAVX2(acc *float64, v *uint16, off *int, p *float32, n int, blocks int)
//
// For each block of 32 columns c (blocks of them) and each k in [0, n)
// in order: acc[c] += float64(float32(v[off[k]+c]) * p[k]), the float32
// product rounded before it is widened, as the portable loop does. A
// block's 32 sums stay in Y8-Y15 across all n rows: each element still
// gets its additions in k order.
TEXT ·axpyF16RowsAVX2(SB), NOSPLIT, $0-48
	MOVQ acc+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ off+16(FP), R8
	MOVQ p+24(FP), R9
	MOVQ n+32(FP), R10
	MOVQ blocks+40(FP), R11
	TESTQ R11, R11
	JEQ done

block:
	VMOVUPD (DI), Y8
	VMOVUPD 32(DI), Y9
	VMOVUPD 64(DI), Y10
	VMOVUPD 96(DI), Y11
	VMOVUPD 128(DI), Y12
	VMOVUPD 160(DI), Y13
	VMOVUPD 192(DI), Y14
	VMOVUPD 224(DI), Y15
	XORQ CX, CX
	CMPQ CX, R10
	JGE store

row:
	MOVQ (R8)(CX*8), AX
	LEAQ (SI)(AX*2), AX
	VBROADCASTSS (R9)(CX*4), Y7
	VCVTPH2PS (AX), Y0
	VCVTPH2PS 16(AX), Y1
	VCVTPH2PS 32(AX), Y2
	VCVTPH2PS 48(AX), Y3
	VMULPS Y7, Y0, Y0
	VMULPS Y7, Y1, Y1
	VMULPS Y7, Y2, Y2
	VMULPS Y7, Y3, Y3
	VCVTPS2PD X0, Y4
	VADDPD Y4, Y8, Y8
	VEXTRACTF128 $1, Y0, X0
	VCVTPS2PD X0, Y5
	VADDPD Y5, Y9, Y9
	VCVTPS2PD X1, Y6
	VADDPD Y6, Y10, Y10
	VEXTRACTF128 $1, Y1, X1
	VCVTPS2PD X1, Y4
	VADDPD Y4, Y11, Y11
	VCVTPS2PD X2, Y5
	VADDPD Y5, Y12, Y12
	VEXTRACTF128 $1, Y2, X2
	VCVTPS2PD X2, Y6
	VADDPD Y6, Y13, Y13
	VCVTPS2PD X3, Y4
	VADDPD Y4, Y14, Y14
	VEXTRACTF128 $1, Y3, X3
	VCVTPS2PD X3, Y5
	VADDPD Y5, Y15, Y15
	INCQ CX
	CMPQ CX, R10
	JLT row

store:
	VMOVUPD Y8, (DI)
	VMOVUPD Y9, 32(DI)
	VMOVUPD Y10, 64(DI)
	VMOVUPD Y11, 96(DI)
	VMOVUPD Y12, 128(DI)
	VMOVUPD Y13, 160(DI)
	VMOVUPD Y14, 192(DI)
	VMOVUPD Y15, 224(DI)
	ADDQ $256, DI
	ADDQ $64, SI
	DECQ R11
	JNE block

done:
	VZEROUPPER
	RET
