package testmodel

import (
	"maps"
	"slices"
	"strings"
)

// BPE asks for a byte-level BPE (tokenizer.ggml.model "gpt2") vocabulary
// instead of the SentencePiece one: the 256 byte symbols of GPT-2's
// alphabet, tokens learnt by BPE merges over a small multilingual corpus
// built from the word list (see BPECorpus), and Llama-3 style control
// tokens. Only the " word" tokens of the word list keep their
// output.weight rows, so greedy replies are whole ASCII words and never
// end on their own.
type BPE struct {
	Pre          string // tokenizer.ggml.pre ["llama-bpe"]
	Merges       int    // most merges to learn [1000]
	ChatTemplate string // tokenizer.chat_template [Llama3Template]; "-" for none
}

// Control and user-defined tokens of the BPE vocabulary, in id order after
// the learnt tokens.
var (
	BPEControl     = []string{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
	BPEUserDefined = []string{"<think>", "</think>"}
)

// Llama3Template is a Llama-3 style chat template (Jinja), written for
// these models from the public format.
const Llama3Template = `{{- bos_token }}
{%- for message in messages %}
{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}`

// bpeExtra are corpus words beyond the word list: accents, other scripts,
// emoji, digits and punctuation, so merges cover multi-byte characters.
var bpeExtra = []string{
	"café", "naïve", "über", "señor", "façade", "crème", "brûlée", "ça", "été",
	"日本語", "東京", "中文", "你好", "世界", "こんにちは", "ありがとう", "한국어",
	"Привет", "мир", "Ελληνικά", "שלום", "مرحبا", "😀", "🚀", "👍🏽",
	"123", "2024", "42", "3.14", "...", "!!", "?!", "--", "()", "[]", "{}", "'s", "'re",
	"don't", "it's", "\n\n", "\t",
}

// BPECorpus is the text the BPE merges are learnt from: each word of the
// list and the extras, in order.
func BPECorpus(words []string) []string {
	if words == nil {
		words = DefaultWords
	}
	return append(slices.Clone(words), bpeExtra...)
}

// gpt2Alphabet maps bytes to GPT-2's byte-level symbols.
var gpt2Alphabet = func() [256]string {
	var a [256]string
	keep := func(c int) bool {
		return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)
	}
	n := 0
	for c := range 256 {
		if keep(c) {
			a[c] = string(rune(c))
		} else {
			a[c] = string(rune(256 + n))
			n++
		}
	}
	return a
}()

type bpeVocab struct {
	tokens []string
	types  []int32
	merges []string
	keep   map[int]bool // ids whose output rows stay
	kvs    []kv
}

// build learns the merges and lays out the vocabulary.
func (b BPE) build(words []string) bpeVocab {
	if b.Pre == "" {
		b.Pre = "llama-bpe"
	}
	if b.Merges == 0 {
		b.Merges = 1000
	}
	if b.ChatTemplate == "" {
		b.ChatTemplate = Llama3Template
	}
	// Each corpus word, with the space that precedes it in running text,
	// as a sequence of byte-level symbols.
	var seqs [][]string
	for _, w := range BPECorpus(words) {
		var s []string
		for _, c := range []byte(" " + w) {
			s = append(s, gpt2Alphabet[c])
		}
		seqs = append(seqs, s)
	}
	var v bpeVocab
	have := map[string]bool{}
	add := func(tok string, typ int32) {
		if !have[tok] {
			have[tok] = true
			v.tokens = append(v.tokens, tok)
			v.types = append(v.types, typ)
		}
	}
	for _, s := range gpt2Alphabet {
		add(s, tokNormal)
	}
	for len(v.merges) < b.Merges {
		// The most frequent adjacent pair; ties go to the smallest pair.
		counts := map[[2]string]int{}
		for _, s := range seqs {
			for i := 1; i < len(s); i++ {
				counts[[2]string{s[i-1], s[i]}]++
			}
		}
		if len(counts) == 0 {
			break
		}
		var best [2]string
		bestN := 0
		for p, n := range counts {
			if n > bestN || n == bestN && (p[0] < best[0] || p[0] == best[0] && p[1] < best[1]) {
				best, bestN = p, n
			}
		}
		v.merges = append(v.merges, best[0]+" "+best[1])
		add(best[0]+best[1], tokNormal)
		for k, s := range seqs {
			var out []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, best[0]+best[1])
					i++
					continue
				}
				out = append(out, s[i])
			}
			seqs[k] = out
		}
	}
	for _, s := range BPEControl {
		add(s, tokControl)
	}
	for _, s := range BPEUserDefined {
		add(s, tokUserDefined)
	}

	if words == nil {
		words = DefaultWords
	}
	v.keep = map[int]bool{}
	for id, tok := range v.tokens {
		for _, w := range words {
			if tok == "Ġ"+w {
				v.keep[id] = true
			}
		}
	}
	id := func(s string) uint32 { return uint32(slices.Index(v.tokens, s)) }
	v.kvs = []kv{
		{"tokenizer.ggml.model", "gpt2"},
		{"tokenizer.ggml.pre", b.Pre},
		{"tokenizer.ggml.tokens", v.tokens},
		{"tokenizer.ggml.token_type", v.types},
		{"tokenizer.ggml.merges", v.merges},
		{"tokenizer.ggml.bos_token_id", id("<|begin_of_text|>")},
		{"tokenizer.ggml.eos_token_id", id("<|eot_id|>")},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}
	if b.ChatTemplate != "-" {
		v.kvs = append(v.kvs, kv{"tokenizer.chat_template", b.ChatTemplate})
	}
	return v
}

const tokUserDefined int32 = 4

// Vocabulary is a ready-made vocabulary, such as a real model's: its
// tokenizer.* metadata as a GGUF reader returns it (tokenizer.ggml.tokens
// as []string, token_type as []int32, scores as []float32, ids as
// uint32, flags as bool, merges as []string) and the tokens whose
// output.weight rows stay (nil: every normal token of two or more
// characters).
type Vocabulary struct {
	Metadata map[string]any
	Keep     func(id int, token string) bool
}

// customVocab is the vocabulary that replaces the generated SentencePiece
// one, if any.
func (o Options) customVocab() (bpeVocab, bool) {
	switch {
	case o.Vocabulary != nil:
		return o.Vocabulary.layout(), true
	case o.BPE != nil:
		return o.BPE.build(o.Words), true
	}
	return bpeVocab{}, false
}

func (v *Vocabulary) layout() bpeVocab {
	var out bpeVocab
	out.tokens, _ = v.Metadata["tokenizer.ggml.tokens"].([]string)
	out.types, _ = v.Metadata["tokenizer.ggml.token_type"].([]int32)
	if out.types == nil {
		out.types = make([]int32, len(out.tokens))
		for i := range out.types {
			out.types[i] = tokNormal
		}
	}
	keys := slices.Sorted(maps.Keys(v.Metadata))
	for _, k := range keys {
		out.kvs = append(out.kvs, kv{k, v.Metadata[k]})
	}
	out.keep = map[int]bool{}
	for id, tok := range out.tokens {
		if v.Keep != nil && v.Keep(id, tok) || v.Keep == nil && out.types[id] == tokNormal && len([]rune(tok)) > 1 {
			out.keep[id] = true
		}
	}
	return out
}

// withoutTokenizer drops the tokenizer.* entries from kvs.
func withoutTokenizer(kvs []kv) []kv {
	return slices.DeleteFunc(kvs, func(e kv) bool { return strings.HasPrefix(e.key, "tokenizer.") })
}

// TokenizerMetadata returns the tokenizer.* metadata the model file for o
// carries, as a GGUF reader returns it (typed slices, uint32 ids), so
// tokenizer tests need not parse the whole file.
func TokenizerMetadata(o Options) (map[string]any, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	kvs := spmTokenizerKVs(o.Words)
	if v, custom := o.customVocab(); custom {
		kvs = v.kvs
	}
	if o.ChatTemplate != "" && o.BPE == nil {
		kvs = append(kvs, kv{"tokenizer.chat_template", o.ChatTemplate})
	}
	md := make(map[string]any, len(kvs))
	for _, e := range kvs {
		md[e.key] = e.val
	}
	return md, nil
}

// spmTokenizerKVs is the SentencePiece vocabulary's metadata, as Write
// lays it out.
func spmTokenizerKVs(words []string) []kv {
	toks, scores, types := vocab(words)
	return []kv{
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", toks},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(UnknownID)},
		{"tokenizer.ggml.bos_token_id", uint32(BOSID)},
		{"tokenizer.ggml.eos_token_id", uint32(EOSID)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
	}
}
