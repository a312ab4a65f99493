// Package engine is workerd's built-in inference runtime: a pure-Go
// executor for llama-family GGUF models (llama, and qwen2 with its QKV
// biases) that can run the whole model or any contiguous range of its
// layers.
//
// The sharding API is what a pipeline of workers uses:
//
//   - Model.Embed turns tokens into hidden states (the first stage);
//   - Stage.Forward runs layers [first, last) over a batch of positions,
//     appending their keys and values to the stage's KV cache;
//   - Model.Head applies the final norm and the output matrix (the last
//     stage);
//   - Stage.Truncate rolls the KV cache back to n positions when drafted
//     tokens are rejected;
//   - Pipeline.Verify checks k drafted tokens in one batched pass.
//
// Pipeline strings stages together in one process (Step for every
// position's logits, Next for the last one's); Shard is the interface a
// stage satisfies.
//
// Hidden states cross the network in the wire form of hidden.go
// (float32 exact, or float16 lossy) with a SHA-256 for receipts.
//
// Numerics follow ggml's CPU reference (see package quant): activations
// are prepared per weight type as llama.cpp prepares them, the KV cache
// holds float16 like llama.cpp's default cache, RMSNorm and RoPE use the
// file's epsilon and frequency base with ggml's float32 operation order.
// Each output element is computed by the same instructions whatever the
// batch size, the layer split or the goroutine it runs on, so split and
// batched runs are bit-identical to whole single-token runs.
package engine
