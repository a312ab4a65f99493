// Package quant holds the engine's numeric kernels: half-precision
// conversion, the GGUF block layouts of Q8_0, Q4_K and Q6_K (decoded
// exactly as ggml defines them), and row dot products between a weight
// row and an activation vector.
//
// Activations are prepared the way ggml's CPU backend prepares them for
// each weight type (its vec_dot_type): rounded to F16 for F16 weights,
// quantized to Q8_0 for Q8_0 weights and to Q8_K for Q4_K/Q6_K weights,
// kept as F32 for F32 weights. The integer parts of the quantized dot
// products are exact, and the float reductions follow ggml's reference
// order, so results agree with llama.cpp to rounding noise (bit for bit
// for the K-quants). Every kernel is a pure function of its inputs:
// running a row alone or in a batch, on any goroutine, gives the same
// bits, which is what makes split and batched execution exact.
//
// # Vectorised kernels
//
// On amd64 with AVX2 and F16C whole rows run in assembly (q8_amd64.s):
// Q8_0 with its integer block sums reduced eight blocks at a time and the
// block terms added in block order; Q4_K and Q6_K with VPSHUFB putting
// each of ggml's eight integer lanes' elements side by side for
// VPMADDUBSW, scales and mins unpacked in registers; so the float
// reduction — and the result — is bit for bit the portable Go kernel's
// (tests compare them on random blocks). DotTile computes one weight row
// against a batch's activations, eight (then four) at a time for Q8_0,
// Q4_K and Q6_K (ktile_amd64.s; sixteen for Q8_0 and whole runs of
// eights for the K-quants in one call where the CPU has AVX-512 with
// VNNI, q8_512_amd64.s and ktile512_amd64.s): each weight block or
// super-block is unpacked once for the tile, the K-quant activations
// read in the tile's order (Act.QT), and each result is the bits Dot
// gives alone (only the exact integer sums are grouped differently).
// DotTileRows runs DotTile over a block of rows, the activations checked
// once for all of them. DotRows is decode's
// counterpart: many weight rows against one activation, for Q4_K and
// Q6_K all in one assembly call (AVX-512 with VBMI and VNNI where the
// CPU has them, krows512_amd64.s; else AVX2), each row Dot's bits.
// The F32/F16 dots sum float32 products in float64 lanes (F16C converts
// halves exactly).
// Elsewhere, or without AVX2, the portable kernels run: plain Go,
// unrolled, bounds checks hoisted. Both use every core through the
// engine's row-parallel matrix products.
package quant
