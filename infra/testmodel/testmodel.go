// Package testmodel writes a tiny random-weight llama model as a GGUF v3
// file, so tests can run real inference servers (Ollama, the built-in
// engine) with no model download. The output is byte-identical for a given
// Options value.
//
// The vocabulary is SentencePiece-style: <unk>, <s>, </s>, the 256 byte
// tokens, "▁", the lowercase letters and a few dozen "▁word" pieces. The
// output.weight rows of every token except the word pieces are zero, so
// greedy decoding emits whole words and never the end-of-sequence token:
// replies end on a token limit or a stop string.
package testmodel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// TensorType is a ggml tensor element type, as GGUF numbers them.
type TensorType uint32

// Supported tensor types (ggml's numbering). The quantized ones are
// encoded by quantize.go; Q4_K and Q6_K need rows that are a multiple of
// 256 elements (Embedding and FeedForward).
const (
	F32  TensorType = 0
	F16  TensorType = 1
	Q8_0 TensorType = 8
	Q4_K TensorType = 12
	Q6_K TensorType = 14
)

// Options shapes the model. Zero fields take the defaults in brackets.
type Options struct {
	Seed        int64      // PRNG seed for every weight
	Name        string     // general.name ["c0mpute-tiny"]
	Embedding   int        // llama.embedding_length [64]
	Layers      int        // llama.block_count [2]
	Heads       int        // llama.attention.head_count [4]
	KVHeads     int        // llama.attention.head_count_kv [Heads]
	FeedForward int        // llama.feed_forward_length [128]
	Context     int        // llama.context_length [256]
	Words       []string   // word pieces, without the "▁" [DefaultWords]
	Type        TensorType // type of the 2-D weight matrices [F32]; Q4_K writes a Q4_K_M-style mix (see weightType)
	// Arch is general.architecture ["llama"]; "qwen2" adds the Q, K and V
	// biases and makes engines use NeoX-style RoPE.
	Arch string
	// BPE, when set, replaces the SentencePiece vocabulary with a
	// byte-level BPE one (bpe.go).
	BPE *BPE
	// Vocabulary, when set, replaces the vocabulary with a given one, e.g. a
	// real model's (bpe.go).
	Vocabulary *Vocabulary
	// ChatTemplate, when set, is written as tokenizer.chat_template with
	// the SentencePiece vocabulary (a BPE vocabulary carries its own).
	ChatTemplate string
	// Perturb, when positive, adds uniform noise of this scale (relative
	// to each weight's own scale) to the output matrix, from a second PRNG
	// seeded by PerturbSeed, after the weights are drawn: the same Seed
	// with a Perturb is the same model with a noisier head, a draft model
	// whose greedy choices agree with the unperturbed target's at a rate
	// that falls as Perturb grows. The noise of each weight is uniform in
	// ±Perturb × the bound the output matrix was drawn within; rows that
	// are zero (tokens greedy decoding never picks) stay zero, so the
	// draft emits the same kind of tokens as its target.
	Perturb     float64
	PerturbSeed int64
}

// DefaultWords are the word pieces of the default vocabulary.
var DefaultWords = []string{
	"the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "to", "house",
	"big", "small", "red", "blue", "green", "tree", "sun", "moon", "star",
	"sky", "sea", "fish", "bird", "sings", "runs", "jumps", "over", "under",
	"with", "is", "was", "it", "we", "you", "they", "hello", "world", "good",
	"day", "night", "time", "apple", "bread",
}

// Token ids of the control tokens.
const (
	UnknownID = 0
	BOSID     = 1
	EOSID     = 2
)

// SentencePiece token types (tokenizer.ggml.token_type).
const (
	tokNormal  int32 = 1
	tokUnknown int32 = 2
	tokControl int32 = 3
	tokByte    int32 = 6
)

const alignment = 32

func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Embedding, 64)
	def(&o.Layers, 2)
	def(&o.Heads, 4)
	def(&o.KVHeads, o.Heads)
	def(&o.FeedForward, 128)
	def(&o.Context, 256)
	if o.Name == "" {
		o.Name = "c0mpute-tiny"
	}
	if o.Arch == "" {
		o.Arch = "llama"
	}
	if o.Words == nil {
		o.Words = DefaultWords
	}
	switch {
	case o.Embedding < 0 || o.Layers < 0 || o.Heads < 0 || o.KVHeads < 0 || o.FeedForward < 0 || o.Context < 0:
		return o, errors.New("testmodel: negative dimension")
	case o.Embedding%o.Heads != 0 || (o.Embedding/o.Heads)%2 != 0:
		return o, fmt.Errorf("testmodel: embedding %d must split into %d heads of even size", o.Embedding, o.Heads)
	case o.Heads%o.KVHeads != 0:
		return o, fmt.Errorf("testmodel: %d heads are not a multiple of %d KV heads", o.Heads, o.KVHeads)
	case o.Arch != "llama" && o.Arch != "qwen2":
		return o, fmt.Errorf("testmodel: architecture %q (llama or qwen2)", o.Arch)
	case !(o.Perturb >= 0) || math.IsInf(o.Perturb, 0): // NaN fails the comparison
		return o, fmt.Errorf("testmodel: perturb %v must be a finite scale >= 0 (0 for no noise)", o.Perturb)
	}
	if err := checkType(o.Type, o.Embedding, o.FeedForward); err != nil {
		return o, err
	}
	return o, nil
}

// Vocab returns the tokens of the model's vocabulary, in id order.
func (o Options) Vocab() []string {
	words := o.Words
	if words == nil {
		words = DefaultWords
	}
	toks, _, _ := vocab(words)
	return toks
}

func vocab(words []string) (toks []string, scores []float32, types []int32) {
	add := func(t string, s float32, typ int32) {
		toks, scores, types = append(toks, t), append(scores, s), append(types, typ)
	}
	add("<unk>", 0, tokUnknown)
	add("<s>", 0, tokControl)
	add("</s>", 0, tokControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokByte)
	}
	add("▁", -1, tokNormal)
	for c := 'a'; c <= 'z'; c++ {
		add(string(c), -2-float32(c-'a')/100, tokNormal)
	}
	for i, w := range words {
		add("▁"+w, -10-float32(i)/100, tokNormal)
	}
	return toks, scores, types
}

// Bytes returns the model file.
func Bytes(o Options) ([]byte, error) {
	var b bytes.Buffer
	if err := Write(&b, o); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Write writes the model file to w.
func Write(w io.Writer, o Options) error {
	o, err := o.withDefaults()
	if err != nil {
		return err
	}
	toks, scores, types := vocab(o.Words)
	bpe, custom := o.customVocab()
	if custom {
		toks, types = bpe.tokens, bpe.types
	}
	nv, ne, nff := len(toks), o.Embedding, o.FeedForward
	headDim := ne / o.Heads
	nkv := headDim * o.KVHeads

	a := o.Arch + "."
	kvs := []kv{
		{"general.architecture", o.Arch},
		{"general.name", o.Name},
		{"general.file_type", fileType(o.Type)},
		{"general.alignment", uint32(alignment)},
		{a + "context_length", uint32(o.Context)},
		{a + "embedding_length", uint32(ne)},
		{a + "block_count", uint32(o.Layers)},
		{a + "feed_forward_length", uint32(nff)},
		{a + "attention.head_count", uint32(o.Heads)},
		{a + "attention.head_count_kv", uint32(o.KVHeads)},
		{a + "attention.layer_norm_rms_epsilon", float32(1e-5)},
		{a + "rope.dimension_count", uint32(headDim)},
		{a + "rope.freq_base", float32(10000)},
		{a + "vocab_size", uint32(nv)},
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
	if custom {
		kvs = append(withoutTokenizer(kvs), bpe.kvs...)
	}
	if o.ChatTemplate != "" && o.BPE == nil {
		kvs = append(kvs, kv{"tokenizer.chat_template", o.ChatTemplate})
	}

	// Weights, in a fixed order from one PRNG stream. Dims are GGUF order:
	// the first is the contiguous one (a matrix's input size).
	rng := splitmix(uint64(o.Seed))
	uniform := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.float()*2-1) * float32(scale)
		}
		return v
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	bound := func(in int) float64 { return math.Sqrt(3 / float64(in)) } // unit-variance preserving
	linear := func(name string, in, out int) tensor {
		return tensor{name, []uint64{uint64(in), uint64(out)}, weightType(o.Type, name), uniform(in*out, bound(in))}
	}
	ts := []tensor{{"token_embd.weight", []uint64{uint64(ne), uint64(nv)}, o.Type, uniform(ne*nv, 1)}}
	for l := 0; l < o.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor{p + "attn_norm.weight", []uint64{uint64(ne)}, F32, ones(ne)},
			linear(p+"attn_q.weight", ne, ne),
			linear(p+"attn_k.weight", ne, nkv),
			linear(p+"attn_v.weight", ne, nkv),
			linear(p+"attn_output.weight", ne, ne),
			tensor{p + "ffn_norm.weight", []uint64{uint64(ne)}, F32, ones(ne)},
			linear(p+"ffn_gate.weight", ne, nff),
			linear(p+"ffn_up.weight", ne, nff),
			linear(p+"ffn_down.weight", nff, ne),
		)
		if o.Arch == "qwen2" {
			ts = append(ts,
				tensor{p + "attn_q.bias", []uint64{uint64(ne)}, F32, uniform(ne, 0.5)},
				tensor{p + "attn_k.bias", []uint64{uint64(nkv)}, F32, uniform(nkv, 0.5)},
				tensor{p + "attn_v.bias", []uint64{uint64(nkv)}, F32, uniform(nkv, 0.5)},
			)
		}
	}
	// Logits with a standard deviation of about 6 keep greedy choices far
	// apart, so every engine picks the same token despite rounding.
	const headGain = 6
	out := linear("output.weight", ne, nv)
	for i := range out.data {
		out.data[i] *= headGain
	}
	if o.Perturb > 0 {
		// A stream of its own, so the weights above are drawn exactly as
		// without Perturb; the constant keeps a PerturbSeed equal to Seed
		// from replaying the weights' stream as noise.
		noise := splitmix(uint64(o.PerturbSeed) ^ 0x5eed_d4af_7c0f_fee1)
		scale := o.Perturb * headGain * bound(ne)
		for i := range out.data {
			out.data[i] += float32((noise.float()*2 - 1) * scale)
		}
	}
	for id, typ := range types {
		if custom && !bpe.keep[id] || !custom && (typ != tokNormal || len([]rune(toks[id])) == 1) { // control, byte, ▁ and letters
			clear(out.data[id*ne : (id+1)*ne])
		}
	}
	ts = append(ts, tensor{"output_norm.weight", []uint64{uint64(ne)}, F32, ones(ne)}, out)

	return encode(w, kvs, ts)
}

type kv struct {
	key string
	val any
}

type tensor struct {
	name string
	dims []uint64
	typ  TensorType
	data []float32
}

// size is the tensor's encoded size in bytes.
func (t tensor) size() uint64 { return encodedSize(t.typ, len(t.data)) }

// appendData encodes the elements in the tensor's type.
func (t tensor) appendData(b []byte) []byte { return appendEncoded(b, t.typ, t.data) }

// GGUF metadata value types.
const (
	ggufUint32  = 4
	ggufInt32   = 5
	ggufFloat32 = 6
	ggufBool    = 7
	ggufString  = 8
	ggufArray   = 9
)

func encode(w io.Writer, kvs []kv, ts []tensor) error {
	le := binary.LittleEndian
	b := []byte("GGUF")
	b = le.AppendUint32(b, 3)
	b = le.AppendUint64(b, uint64(len(ts)))
	b = le.AppendUint64(b, uint64(len(kvs)))
	str := func(b []byte, s string) []byte { return append(le.AppendUint64(b, uint64(len(s))), s...) }
	for _, e := range kvs {
		b = str(b, e.key)
		switch v := e.val.(type) {
		case uint32:
			b = le.AppendUint32(le.AppendUint32(b, ggufUint32), v)
		case float32:
			b = le.AppendUint32(le.AppendUint32(b, ggufFloat32), math.Float32bits(v))
		case bool:
			x := byte(0)
			if v {
				x = 1
			}
			b = append(le.AppendUint32(b, ggufBool), x)
		case string:
			b = str(le.AppendUint32(b, ggufString), v)
		case []string:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, ggufArray), ggufString), uint64(len(v)))
			for _, s := range v {
				b = str(b, s)
			}
		case []float32:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, ggufArray), ggufFloat32), uint64(len(v)))
			for _, f := range v {
				b = le.AppendUint32(b, math.Float32bits(f))
			}
		case []int32:
			b = le.AppendUint64(le.AppendUint32(le.AppendUint32(b, ggufArray), ggufInt32), uint64(len(v)))
			for _, n := range v {
				b = le.AppendUint32(b, uint32(n))
			}
		default:
			return fmt.Errorf("testmodel: metadata %s has unsupported type %T", e.key, v)
		}
	}
	var off uint64
	for _, t := range ts {
		b = str(b, t.name)
		b = le.AppendUint32(b, uint32(len(t.dims)))
		for _, d := range t.dims {
			b = le.AppendUint64(b, d)
		}
		b = le.AppendUint32(b, uint32(t.typ))
		b = le.AppendUint64(b, off)
		off = pad(off + t.size())
	}
	for _, t := range ts {
		b = append(b, make([]byte, pad(uint64(len(b)))-uint64(len(b)))...)
		b = t.appendData(b)
	}
	_, err := w.Write(b)
	return err
}

func pad(n uint64) uint64 { return (n + alignment - 1) / alignment * alignment }

// rng is splitmix64: tiny, fully specified, so weights never change with
// the Go version.
type rng struct{ s uint64 }

func splitmix(seed uint64) *rng { return &rng{seed} }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// float returns a uniform value in [0, 1).
func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }
