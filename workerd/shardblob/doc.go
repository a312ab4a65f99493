// Package shardblob turns one GGUF model into the blobs a sharded ring
// pulls, and opens a ring member's layer range from them.
//
// A model of L layers becomes L+2 blobs, each itself a GGUF v3 file
// written by gguf.Write (so the bytes, and therefore the hashes, are the
// same on every machine for the same source file):
//
//   - the embedding: all of the source's metadata (architecture keys,
//     tokenizer, chat template) and token_embd.weight. The first stage
//     builds its tokenizer and chat template from it;
//   - layer i: general.architecture, general.name, general.alignment when
//     set, every "<arch>." key, the blk.i.* tensors, and rope_freqs.weight
//     when the model has it (every layer's attention rotates with it);
//   - the head: the same keys, output_norm.weight, and output.weight, or
//     token_embd.weight for a model with tied embeddings.
//
// Each blob is stored as <dir>/<hex sha256>, the name shard.Pull gives it,
// so a directory Split writes is one Pull could have written and the
// other way round. Split returns the unsigned manifest and model
// descriptor (functions/shard); Published.Sign signs both, the descriptor
// naming the signed manifest's hash.
//
// Open is the member's side: it maps the blobs shard.Manifest.Blobs names
// for a layer range, re-hashes every byte against the manifest before the
// engine sees it (a blob changed on disk after the pull is refused, named),
// and loads an engine.Model holding exactly that range
// (engine.LoadParts). Checking the manifest's signature and that its
// publisher is the one the plan trusts is the caller's job, as it is for
// Pull.
//
// The blobs hold weights and the model's own metadata, never prompt or
// completion text.
package shardblob
