// Macros shared by the Q4_K / Q6_K row kernels (quant.DotRows) of
// ktile_amd64.s (AVX2) and krows512_amd64.s (AVX-512): each row's float
// operations are dotQ4K's and dotQ6K's, whichever integer kernel fed
// them. Registers as those files describe: R8 the current row, DX the
// next result, SI the super-block, DI and BX its offsets in QT and D,
// R11 D, Y4 the block's integer lanes, Y5 the float lanes, X6 the sum.

// ROWSUM adds the float lanes Y5 to X6 one by one, lane 0 first, and
// stores X6 at (DX): dotQ4K's and dotQ6K's final loop.
#define ROWSUM \
	VADDSS X5, X6, X6 \
	VMOVSHDUP X5, X7 \
	VADDSS X7, X6, X6 \
	VPERMILPS $0xAA, X5, X7 \
	VADDSS X7, X6, X6 \
	VPERMILPS $0xFF, X5, X7 \
	VADDSS X7, X6, X6 \
	VEXTRACTF128 $1, Y5, X5 \
	VADDSS X5, X6, X6 \
	VMOVSHDUP X5, X7 \
	VADDSS X7, X6, X6 \
	VPERMILPS $0xAA, X5, X7 \
	VADDSS X7, X6, X6 \
	VPERMILPS $0xFF, X5, X7 \
	VADDSS X7, X6, X6 \
	VMOVSS X6, (DX)

// ROWSTART points SI at the row, zeroes its offsets, lanes and sum
// (CX, the blocks, is loaded by the caller).
#define ROWSTART \
	MOVQ R8, SI \
	XORQ DI, DI \
	XORQ BX, BX \
	VXORPS Y5, Y5, Y5 \
	VXORPS X6, X6, X6

// ROWLANES adds the block's integer lanes Y4 to the float lanes Y5:
// float32(lanes)·(dw·D[b]), dw the F16 scale at woff(SI) and D[b] at
// (R11)(BX*1).
#define ROWLANES(woff) \
	VCVTDQ2PS Y4, Y4 \
	MOVWLZX woff(SI), R13 \
	VMOVD R13, X14 \
	VCVTPH2PS X14, X14 \
	VMULSS (R11)(BX*1), X14, X14 \
	VBROADCASTSS X14, Y14 \
	VMULPS Y14, Y4, Y4 \
	VADDPS Y4, Y5, Y5
