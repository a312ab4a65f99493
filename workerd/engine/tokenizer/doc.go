// Package tokenizer is the tokenizer a GGUF model file carries in its
// metadata, reimplemented in Go to match llama.cpp (as vendored by Ollama
// 0.6.5) token for token.
//
// Two vocabulary kinds are supported, named by tokenizer.ggml.model:
//
//   - "llama": SentencePiece BPE over Unicode characters with "▁" for a
//     space, merges chosen by token score, and byte fallback (<0xNN>
//     tokens) for characters the vocabulary lacks.
//   - "gpt2": byte-level BPE with ranked merges (tokenizer.ggml.merges),
//     after a pre-tokenizer that splits the text into words. The
//     pre-tokenizer is chosen by tokenizer.ggml.pre exactly as llama.cpp
//     chooses it, and every name llama.cpp knows is supported: the
//     llama-3, qwen2 and GPT-2 patterns (and the pattern lists built on
//     them: default, starcoder, falcon) by hand-written splitters, as in
//     llama.cpp; the others (deepseek-llm, deepseek-coder, deepseek-v3,
//     gpt-4o, tekken, chameleon, bloom, poro-chat, gpt3-finnish, viking)
//     the way llama.cpp runs them through std::regex: an ECMAScript
//     backtracking engine (github.com/dlclark/regexp2) over the same
//     "collapsed" text, where each code point outside ASCII stands for its
//     Unicode category. An absent or unknown name means "default", as in
//     llama.cpp.
//
// Special tokens (types control, user-defined and unknown) found in the
// text are split out first, longest first, as llama.cpp does; control and
// unknown tokens only when Encode is asked to parse special tokens.
// BOS/EOS ids and whether to add them come from the metadata with
// llama.cpp's defaults; IsEOG reports the end-of-generation set llama.cpp
// derives (EOS, EOT, EOM and tokens such as <|eot_id|> or <|im_end|>).
//
// Text that is not valid UTF-8 is encoded as llama.cpp encodes it: a
// SentencePiece vocabulary keeps the bytes through byte tokens (though a
// broken sequence's lead byte may swallow part of the "▁" that stands for
// a following space); a byte-level BPE vocabulary first replaces each
// invalid byte with U+FFFD.
// Where llama.cpp would abort (a SentencePiece vocabulary without byte
// tokens meeting an unknown character) the unknown token is used instead,
// and a vocabulary with neither is refused.
//
// Known differences from llama.cpp, none of which the tested files hit:
// the per-model strip attributes llama.cpp hard-codes (phi-3's special
// tokens, jina-v2's <mask>) are not applied; where llama.cpp's choice
// depends on hash-map or unstable-sort order (two candidate end-of-turn
// tokens, special tokens of equal length overlapping in the text) the
// lowest id wins here.
//
// Decoding follows llama_token_to_piece with special tokens rendered,
// which is what Ollama streams; a Decoder emits text incrementally and
// never splits a UTF-8 character across two deltas.
package tokenizer
