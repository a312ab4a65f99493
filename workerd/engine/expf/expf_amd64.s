#include "textflag.h"

// func expAVX512(dst, src *float32, blocks int, silu bool, masks *uint8, c *consts) uint8
//
// Eight elements per iteration, in float64 lanes: the Go path's fast
// method (fast, nearBoundary, the ranges of exp1) with the same constants
// from c. Horner's steps are fused multiply-adds here, so the float64
// values may differ from the Go path's in the last bits; both are within
// the error bound the margin covers. Lanes outside [lo, hi] other than
// under/over, and lanes near a float32 rounding boundary, are not stored
// and are flagged in masks.
//
// Constants: Z16 16/ln2, Z17 1.5·2^52, Z18 chi, Z19 clo, Z20-Z23 c5-c2,
// Z24 1.0, Z25/Z26 the table, Z27 low-29-bit mask, Z28 1<<28 − margin,
// Z29 2·margin, Y30 the sign flip (SiLU: exp(−x)) or 0, Y31 float32 1,
// Y9 lo, Y10 hi, Y11 under, Y12 over, Y14 +0, Y15 +Inf.
TEXT ·expAVX512(SB), NOSPLIT, $0-49
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ blocks+16(FP), CX
	MOVBLZX silu+24(FP), DX
	MOVQ masks+32(FP), R9
	MOVQ c+40(FP), R8
	XORQ R10, R10

	VMOVUPD 0(R8), Z25
	VMOVUPD 64(R8), Z26
	VBROADCASTSD 128(R8), Z16
	VBROADCASTSD 136(R8), Z17
	VBROADCASTSD 144(R8), Z18
	VBROADCASTSD 152(R8), Z19
	VBROADCASTSD 160(R8), Z20
	VBROADCASTSD 168(R8), Z21
	VBROADCASTSD 176(R8), Z22
	VBROADCASTSD 184(R8), Z23
	VBROADCASTSD 192(R8), Z24
	VPBROADCASTQ 200(R8), Z27
	VPBROADCASTQ 208(R8), Z28
	VPBROADCASTQ 216(R8), Z29
	VBROADCASTSS 224(R8), Y9
	VBROADCASTSS 232(R8), Y10
	VBROADCASTSS 240(R8), Y11
	VBROADCASTSS 248(R8), Y12
	VBROADCASTSS 256(R8), Y31
	VBROADCASTSS 264(R8), Y15
	VPXORD Y14, Y14, Y14
	VPXORD Y30, Y30, Y30
	TESTQ DX, DX
	JZ loop
	VBROADCASTSS 272(R8), Y30

loop:
	TESTQ CX, CX
	JZ done
	VMOVUPS (SI), Y0
	VXORPS Y30, Y0, Y1            // the argument: x, or −x for SiLU
	VCVTPS2PD Y1, Z2

	// k = round(x·16/ln2): Z3 holds 1.5·2^52 + k, Z4 k as a float64.
	VMULPD Z16, Z2, Z3
	VADDPD Z17, Z3, Z3
	VSUBPD Z17, Z3, Z4

	// r = (x − k·chi) − k·clo
	VFNMADD231PD Z18, Z4, Z2
	VFNMADD231PD Z19, Z4, Z2

	// p(r) by Horner
	VMOVAPD Z20, Z5
	VFMADD213PD Z21, Z2, Z5
	VFMADD213PD Z22, Z2, Z5
	VFMADD213PD Z23, Z2, Z5
	VFMADD213PD Z24, Z2, Z5
	VFMADD213PD Z24, Z2, Z5

	// scale = table[k&15] with (k>>4) added to its exponent; VPERMT2PD
	// reads only the index's low four bits, which are k's.
	VMOVAPD Z25, Z6
	VPERMT2PD Z26, Z3, Z6
	VPSUBQ Z17, Z3, Z7
	VPSRAQ $4, Z7, Z7
	VPSLLQ $52, Z7, Z7
	VPADDQ Z7, Z6, Z6
	VMULPD Z6, Z5, Z5             // y

	// K1: y near a float32 rounding boundary.
	VPANDQ Z27, Z5, Z7
	VPSUBQ Z28, Z7, Z7
	VPCMPUQ $1, Z29, Z7, K1
	VCVTPD2PS Z5, Y13

	// K2: in [lo, hi] (false for NaN); K4: at or below under; K5: at or
	// above over.
	VCMPPS $0x1d, Y9, Y1, K2
	VCMPPS $0x12, Y10, Y1, K3
	KANDB K3, K2, K2
	KANDNB K2, K1, K2
	VCMPPS $0x12, Y11, Y1, K4
	VCMPPS $0x1d, Y12, Y1, K5
	VMOVAPS Y14, K4, Y13
	VMOVAPS Y15, K5, Y13
	KORB K4, K2, K2
	KORB K5, K2, K2               // K2: the lanes stored

	TESTQ DX, DX
	JZ store
	VADDPS Y31, Y13, Y13
	VDIVPS Y13, Y0, Y13           // x / (1 + e)

store:
	VMOVUPS Y13, K2, (DI)
	KNOTB K2, K2
	KMOVB K2, AX
	MOVB AX, (R9)
	ORL AX, R10

	ADDQ $32, SI
	ADDQ $32, DI
	INCQ R9
	DECQ CX
	JMP loop

done:
	VZEROUPPER
	MOVB R10, ret+48(FP)
	RET
