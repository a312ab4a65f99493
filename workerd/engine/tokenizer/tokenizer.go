package tokenizer

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-playground/validator/v10"
)

// TokenType is a token's type as GGUF stores it in tokenizer.ggml.token_type.
type TokenType int32

// Token types.
const (
	TypeUndefined   TokenType = 0
	TypeNormal      TokenType = 1
	TypeUnknown     TokenType = 2
	TypeControl     TokenType = 3
	TypeUserDefined TokenType = 4
	TypeUnused      TokenType = 5
	TypeByte        TokenType = 6
)

// mergeRank is a BPE merge's priority and where its line splits into the
// left and right symbols.
type mergeRank struct{ rank, split int32 }

// Vocabulary kinds (tokenizer.ggml.model).
const (
	ModelSentencePiece = "llama"
	ModelBPE           = "gpt2"
)

// Vocab is a tokenizer's description, field for field what GGUF metadata
// holds under tokenizer.ggml.*. Nil pointers take llama.cpp's defaults for
// the model kind.
type Vocab struct {
	Model  string      `validate:"oneof=llama gpt2"` // tokenizer.ggml.model
	Pre    string      // tokenizer.ggml.pre (gpt2 only)
	Tokens []string    `validate:"min=1,max=16777216"` // tokenizer.ggml.tokens, by id
	Scores []float32   // tokenizer.ggml.scores: empty or one per token
	Types  []TokenType // tokenizer.ggml.token_type: empty (all normal) or one per token
	Merges []string    // tokenizer.ggml.merges, "left right", by rank (gpt2 only)

	BOS, EOS, EOT, EOM, UNK, SEP, PAD              *int32 // special token ids
	FIMPre, FIMSuf, FIMMid, FIMPad, FIMRep, FIMSep *int32

	AddBOS, AddEOS, AddSpacePrefix *bool
}

// ID returns a pointer to id, for Vocab's optional fields.
func ID(id int32) *int32 { return &id }

// Flag returns a pointer to b, for Vocab's optional fields.
func Flag(b bool) *bool { return &b }

// NoToken is the id of an absent special token.
const NoToken int32 = -1

// token attributes, as llama.cpp derives them from the token types.
type attr uint16

const (
	attrUndefined attr = 0
	attrUnknown   attr = 1 << 0
	attrUnused    attr = 1 << 1
	attrNormal    attr = 1 << 2
	attrControl   attr = 1 << 3
	attrUser      attr = 1 << 4
	attrByte      attr = 1 << 5
)

type kind int

const (
	kindSPM kind = iota
	kindBPE
)

// Tokenizer encodes text to token ids and back. It is immutable after New
// and safe for concurrent use.
type Tokenizer struct {
	kind   kind
	tokens []string
	scores []float32
	attrs  []attr
	ids    map[string]int32

	ranks        map[string]mergeRank // by merge line "left right"
	pre          pretokenizer
	ignoreMerges bool

	addBOS, addEOS, addSpacePrefix bool
	bos, eos, eot, eom, unk, pad   int32
	eog                            map[int32]bool
	special                        []int32 // control, user-defined and unknown tokens, longest text first
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// New builds a tokenizer from a vocabulary description, checking it.
func New(v Vocab) (*Tokenizer, error) {
	if err := validate.Struct(v); err != nil {
		return nil, fmt.Errorf("tokenizer: invalid vocabulary: %w", err)
	}
	n := len(v.Tokens)
	if len(v.Scores) != 0 && len(v.Scores) != n {
		return nil, fmt.Errorf("tokenizer: %d scores for %d tokens", len(v.Scores), n)
	}
	if len(v.Types) != 0 && len(v.Types) != n {
		return nil, fmt.Errorf("tokenizer: %d token types for %d tokens", len(v.Types), n)
	}
	t := &Tokenizer{
		tokens: make([]string, n),
		scores: make([]float32, n),
		attrs:  make([]attr, n),
		ids:    make(map[string]int32, n),
		eog:    map[int32]bool{},
	}
	for i, s := range v.Tokens {
		if s == "" { // as llama.cpp names empty tokens
			s = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		t.ids[s] = int32(i)
		t.tokens[i] = s
		if len(v.Scores) != 0 {
			t.scores[i] = v.Scores[i]
		}
		t.attrs[i] = attrNormal
		if len(v.Types) != 0 {
			t.attrs[i] = attrOf(v.Types[i])
		}
	}

	if len(t.ids) != n {
		// llama.cpp asserts on this; name the first duplicate.
		for i, s := range t.tokens {
			if t.ids[s] != int32(i) {
				return nil, fmt.Errorf("tokenizer: token %d %q appears twice", i, s)
			}
		}
	}

	// Defaults per kind, then the metadata's overrides (llama.cpp's
	// llama_vocab::impl::load).
	var bos, eos, unk, pad int32
	switch v.Model {
	case ModelSentencePiece:
		t.kind = kindSPM
		bos, eos, unk, pad = 1, 2, 0, NoToken
		t.addSpacePrefix, t.addBOS, t.addEOS = true, true, false
		if len(v.Merges) != 0 {
			return nil, errors.New("tokenizer: a SentencePiece (llama) vocabulary has no merges")
		}
	case ModelBPE:
		t.kind = kindBPE
		bos, eos, unk, pad = 11, 11, NoToken, NoToken
		if len(v.Merges) == 0 {
			return nil, errors.New("tokenizer: a BPE (gpt2) vocabulary needs tokenizer.ggml.merges")
		}
		t.ranks = make(map[string]mergeRank, len(v.Merges))
		// Backwards, so the first of duplicate lines is the one kept.
		for i := len(v.Merges) - 1; i >= 0; i-- {
			m := v.Merges[i]
			// The separator is the first space after the first byte, so
			// a merge may start with a space. A line without one can
			// never match two symbols.
			if len(m) < 2 {
				continue
			}
			j := strings.IndexByte(m[1:], ' ')
			if j < 0 {
				continue
			}
			t.ranks[m] = mergeRank{rank: int32(i), split: int32(j + 1)}
		}
		p, err := preFor(v.Pre)
		if err != nil {
			return nil, err
		}
		t.pre, t.ignoreMerges, t.addBOS = p.split, p.ignoreMerges, p.addBOS
		if p.noBOS {
			bos = NoToken
		}
	}
	if v.AddSpacePrefix != nil {
		t.addSpacePrefix = *v.AddSpacePrefix
	}

	eot, eom := NoToken, NoToken
	fimPre, fimSuf, fimMid, fimPad, fimRep, fimSep := NoToken, NoToken, NoToken, NoToken, NoToken, NoToken
	set := func(dst *int32, src *int32) {
		// llama.cpp keeps the default when the file's id is out of range.
		if src != nil && *src >= 0 && int(*src) < n {
			*dst = *src
		}
	}
	set(&bos, v.BOS)
	set(&eos, v.EOS)
	set(&eot, v.EOT)
	set(&eom, v.EOM)
	set(&unk, v.UNK)
	set(&pad, v.PAD)
	set(&fimPre, v.FIMPre)
	set(&fimSuf, v.FIMSuf)
	set(&fimMid, v.FIMMid)
	set(&fimPad, v.FIMPad)
	set(&fimRep, v.FIMRep)
	set(&fimSep, v.FIMSep)
	for _, id := range []*int32{&bos, &eos, &unk, &pad} {
		if *id >= int32(n) { // a default past a small vocabulary
			*id = NoToken
		}
	}
	if v.AddBOS != nil {
		t.addBOS = *v.AddBOS
	}
	if v.AddEOS != nil {
		t.addEOS = *v.AddEOS
	}

	// Special tokens recognised by their text. llama.cpp walks a hash map
	// here, so with several candidates its pick is arbitrary; the lowest
	// id is taken. A match becomes a control token.
	detect := func(dst *int32, texts ...string) {
		if *dst != NoToken {
			return
		}
		best := NoToken
		for _, s := range texts {
			if id, ok := t.ids[s]; ok && (best == NoToken || id < best) {
				best = id
			}
		}
		if best != NoToken {
			*dst = best
			t.attrs[best] = attrControl
		}
	}
	detect(&eot, "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>")
	detect(&eom, "<|eom_id|>")
	detect(&fimPre, "<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>")
	detect(&fimSuf, "<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>")
	detect(&fimMid, "<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>")
	detect(&fimPad, "<|fim_pad|>", "<fim-pad>", "<PAD>")
	detect(&fimRep, "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>")
	detect(&fimSep, "<|file_sep|>")

	for _, id := range []int32{fimPad, fimRep, fimSep, eos, eot, eom} {
		if id != NoToken {
			t.eog[id] = true
		}
	}
	for _, s := range []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"} {
		if id, ok := t.ids[s]; ok {
			t.eog[id] = true
			t.attrs[id] = attrControl
		}
	}
	t.bos, t.eos, t.eot, t.eom, t.unk, t.pad = bos, eos, eot, eom, unk, pad
	if t.kind == kindSPM && t.unk == NoToken {
		for c := range 256 {
			if t.byteToken(byte(c)) == NoToken {
				return nil, fmt.Errorf("tokenizer: SentencePiece vocabulary has no token for byte 0x%02X and no unknown token", c)
			}
		}
	}

	for id, a := range t.attrs {
		if a&(attrControl|attrUser|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	// llama.cpp's sort is not stable; ties (same length) keep id order here.
	slices.SortStableFunc(t.special, func(a, b int32) int {
		return cmp.Compare(len(t.tokens[b]), len(t.tokens[a]))
	})

	return t, nil
}

func attrOf(typ TokenType) attr {
	switch typ {
	case TypeUnknown:
		return attrUnknown
	case TypeUnused:
		return attrUnused
	case TypeNormal:
		return attrNormal
	case TypeControl:
		return attrControl
	case TypeUserDefined:
		return attrUser
	case TypeByte:
		return attrByte
	default:
		return attrUndefined
	}
}

// VocabSize is the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Token returns the text of token id as the vocabulary spells it ("▁the",
// "Ġthe", "<0x0A>"), or "" for an id out of range.
func (t *Tokenizer) Token(id int32) string {
	if id < 0 || int(id) >= len(t.tokens) {
		return ""
	}
	return t.tokens[id]
}

// Type returns the type of token id (TypeUndefined out of range). Tokens
// llama.cpp recognises as end-of-turn or fill-in-the-middle markers by
// their text are reported as control tokens, as llama.cpp treats them.
func (t *Tokenizer) Type(id int32) TokenType {
	if id < 0 || int(id) >= len(t.attrs) {
		return TypeUndefined
	}
	switch t.attrs[id] {
	case attrUnknown:
		return TypeUnknown
	case attrUnused:
		return TypeUnused
	case attrNormal:
		return TypeNormal
	case attrControl:
		return TypeControl
	case attrUser:
		return TypeUserDefined
	case attrByte:
		return TypeByte
	}
	return TypeUndefined
}

// ID returns the id of the token whose text is s.
func (t *Tokenizer) ID(s string) (int32, bool) {
	id, ok := t.ids[s]
	return id, ok
}

// BOS is the beginning-of-sequence token id, or NoToken.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS is the end-of-sequence token id, or NoToken.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT is the end-of-turn token id, or NoToken.
func (t *Tokenizer) EOT() int32 { return t.eot }

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS && t.bos != NoToken }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS && t.eos != NoToken }

// IsEOG reports whether generating id ends the generation.
func (t *Tokenizer) IsEOG(id int32) bool { return t.eog[id] }

// EOG returns the end-of-generation token ids, ascending.
func (t *Tokenizer) EOG() []int32 {
	ids := make([]int32, 0, len(t.eog))
	for id := range t.eog {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Encode tokenizes text as llama_tokenize(text, addSpecial, parseSpecial)
// does. addSpecial adds BOS/EOS as the vocabulary asks; parseSpecial lets
// the text name control tokens ("<|eot_id|>") — a rendered chat prompt
// needs it; user text on its own should not have it. User-defined tokens
// are always recognised.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	frags := t.partition(text, parseSpecial)
	var out []int32
	if addSpecial && t.AddBOS() {
		out = append(out, t.bos)
	}
	switch t.kind {
	case kindSPM:
		prevSpecial := true // a space prefix for the first text, and after each special token
		var b strings.Builder
		for _, f := range frags {
			if f.id != NoToken {
				out = append(out, f.id)
				prevSpecial = true
				continue
			}
			b.Reset()
			if t.addSpacePrefix && prevSpecial {
				b.WriteByte(' ')
			}
			b.WriteString(f.text)
			out = t.encodeSPM(strings.ReplaceAll(b.String(), " ", "▁"), out)
			prevSpecial = false
		}
	case kindBPE:
		for _, f := range frags {
			if f.id != NoToken {
				out = append(out, f.id)
				continue
			}
			out = t.encodeBPE(f.text, out)
		}
	}
	if addSpecial && t.AddEOS() {
		out = append(out, t.eos)
	}
	return out
}

// fragment is a piece of the input: text still to tokenize, or a special
// token found in it.
type fragment struct {
	text string
	id   int32 // NoToken for text
}

// partition splits the special tokens out of text, longest first.
func (t *Tokenizer) partition(text string, parseSpecial bool) []fragment {
	if text == "" {
		return nil
	}
	frags := []fragment{{text: text, id: NoToken}}
	var next []fragment
	for _, id := range t.special {
		if !parseSpecial && t.attrs[id]&(attrControl|attrUnknown) != 0 {
			continue
		}
		tok := t.tokens[id]
		found := false
		for _, f := range frags {
			if f.id == NoToken && strings.Contains(f.text, tok) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		next = next[:0]
		for _, f := range frags {
			if f.id != NoToken {
				next = append(next, f)
				continue
			}
			s := f.text
			for {
				i := strings.Index(s, tok)
				if i < 0 {
					break
				}
				if i > 0 {
					next = append(next, fragment{text: s[:i], id: NoToken})
				}
				next = append(next, fragment{id: id})
				s = s[i+len(tok):]
			}
			if s != "" {
				next = append(next, fragment{text: s, id: NoToken})
			}
		}
		frags, next = next, frags
	}
	return frags
}

// utf8Len is the length of the UTF-8 sequence a byte starts, judged by its
// high bits alone (llama.cpp's unicode_len_utf8): continuation and invalid
// bytes count as one.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// Piece returns the bytes token id stands for (llama_token_to_piece with
// special tokens rendered): a space for "▁", the byte of a byte token, the
// text of a control token. It may be part of a UTF-8 character. Out of
// range, it is nil.
func (t *Tokenizer) Piece(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	return t.piece(id)
}

func (t *Tokenizer) piece(id int32) []byte {
	text := t.tokens[id]
	a := t.attrs[id]
	switch {
	case a&(attrUnknown|attrControl|attrUser) != 0:
		return []byte(text)
	case a&attrNormal != 0:
		if t.kind == kindSPM {
			return []byte(strings.ReplaceAll(text, "▁", " "))
		}
		return decodeByteLevel(text)
	case a&attrByte != 0 && t.kind == kindSPM:
		// "<0xNN>": llama.cpp reads the two hex digits with strtol.
		var v uint64
		if len(text) >= 5 {
			v = parseHexPrefix(text[3:5])
		}
		return []byte{byte(v)}
	}
	return nil
}

// parseHexPrefix reads leading hex digits as strtol(s, NULL, 16) would
// (skipping leading spaces and a sign), giving 0 when there are none.
func parseHexPrefix(s string) uint64 {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			i = len(s)
			continue
		}
		v = v*16 + uint64(d)
	}
	if neg {
		v = -v
	}
	return v
}

// Decode concatenates the pieces of ids: the text a model's output stands
// for, special tokens included, with no space removed (what Ollama
// streams). Bytes that are not valid UTF-8 are kept as they are.
func (t *Tokenizer) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		b = append(b, t.Piece(id)...)
	}
	return string(b)
}
