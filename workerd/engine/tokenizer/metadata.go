package tokenizer

import (
	"fmt"
	"math"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// GGUF metadata keys the tokenizer reads.
const (
	KeyModel          = "tokenizer.ggml.model"
	KeyPre            = "tokenizer.ggml.pre"
	KeyTokens         = "tokenizer.ggml.tokens"
	KeyScores         = "tokenizer.ggml.scores"
	KeyTokenType      = "tokenizer.ggml.token_type"
	KeyMerges         = "tokenizer.ggml.merges"
	KeyBOS            = "tokenizer.ggml.bos_token_id"
	KeyEOS            = "tokenizer.ggml.eos_token_id"
	KeyEOT            = "tokenizer.ggml.eot_token_id"
	KeyEOM            = "tokenizer.ggml.eom_token_id"
	KeyUNK            = "tokenizer.ggml.unknown_token_id"
	KeySEP            = "tokenizer.ggml.seperator_token_id" // sic, as llama.cpp spells it
	KeyPAD            = "tokenizer.ggml.padding_token_id"
	KeyAddBOS         = "tokenizer.ggml.add_bos_token"
	KeyAddEOS         = "tokenizer.ggml.add_eos_token"
	KeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix"
)

// FromMetadata builds the tokenizer a GGUF file describes, from its
// metadata key/values. Values may be any Go integer or float kind, bool,
// string, or typed slices ([]string, []float32, []int32, …) or []any of
// those (arrays as a GGUF reader returns them).
func FromMetadata(md map[string]any) (*Tokenizer, error) {
	var v Vocab
	var err error
	if v.Model, err = mdString(md, KeyModel, true); err != nil {
		return nil, err
	}
	if v.Model != ModelSentencePiece && v.Model != ModelBPE {
		return nil, fmt.Errorf("tokenizer: %s %q is not supported (llama or gpt2)", KeyModel, v.Model)
	}
	if v.Pre, err = mdString(md, KeyPre, false); err != nil {
		return nil, err
	}
	if v.Tokens, err = mdStrings(md, KeyTokens, true); err != nil {
		return nil, err
	}
	if v.Scores, err = mdFloats(md, KeyScores); err != nil {
		return nil, err
	}
	types, err := mdInts(md, KeyTokenType)
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		v.Types = append(v.Types, TokenType(t))
	}
	if v.Merges, err = mdStrings(md, KeyMerges, false); err != nil {
		return nil, err
	}
	ids := []struct {
		key string
		dst **int32
	}{
		{KeyBOS, &v.BOS}, {KeyEOS, &v.EOS}, {KeyEOT, &v.EOT}, {KeyEOM, &v.EOM},
		{KeyUNK, &v.UNK}, {KeySEP, &v.SEP}, {KeyPAD, &v.PAD},
		{"tokenizer.ggml.fim_pre_token_id", &v.FIMPre}, {"tokenizer.ggml.fim_suf_token_id", &v.FIMSuf},
		{"tokenizer.ggml.fim_mid_token_id", &v.FIMMid}, {"tokenizer.ggml.fim_pad_token_id", &v.FIMPad},
		{"tokenizer.ggml.fim_rep_token_id", &v.FIMRep}, {"tokenizer.ggml.fim_sep_token_id", &v.FIMSep},
		// deprecated names of the first three
		{"tokenizer.ggml.prefix_token_id", &v.FIMPre}, {"tokenizer.ggml.suffix_token_id", &v.FIMSuf},
		{"tokenizer.ggml.middle_token_id", &v.FIMMid},
	}
	for _, e := range ids {
		raw, ok := md[e.key]
		if !ok {
			continue
		}
		n, ok := gguf.Int(raw)
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s is %T, not an integer", e.key, raw)
		}
		if n < 0 || n > math.MaxInt32 {
			continue // out of range: llama.cpp keeps its default
		}
		id := int32(n)
		*e.dst = &id
	}
	flags := []struct {
		key string
		dst **bool
	}{{KeyAddBOS, &v.AddBOS}, {KeyAddEOS, &v.AddEOS}, {KeyAddSpacePrefix, &v.AddSpacePrefix}}
	for _, e := range flags {
		raw, ok := md[e.key]
		if !ok {
			continue
		}
		b, ok := raw.(bool)
		if !ok {
			return nil, fmt.Errorf("tokenizer: %s is %T, not a bool", e.key, raw)
		}
		*e.dst = &b
	}
	return New(v)
}

func mdString(md map[string]any, key string, required bool) (string, error) {
	raw, ok := md[key]
	if !ok {
		if required {
			return "", fmt.Errorf("tokenizer: metadata has no %s", key)
		}
		return "", nil
	}
	s, ok := raw.(string)
	if !ok {
		return "", fmt.Errorf("tokenizer: %s is %T, not a string", key, raw)
	}
	return s, nil
}

func mdStrings(md map[string]any, key string, required bool) ([]string, error) {
	raw, ok := md[key]
	if !ok {
		if required {
			return nil, fmt.Errorf("tokenizer: metadata has no %s", key)
		}
		return nil, nil
	}
	switch a := raw.(type) {
	case []string:
		return a, nil
	case []any:
		out := make([]string, len(a))
		for i, x := range a {
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("tokenizer: %s[%d] is %T, not a string", key, i, x)
			}
			out[i] = s
		}
		return out, nil
	}
	return nil, fmt.Errorf("tokenizer: %s is %T, not an array of strings", key, raw)
}

func mdFloats(md map[string]any, key string) ([]float32, error) {
	raw, ok := md[key]
	if !ok {
		return nil, nil
	}
	switch a := raw.(type) {
	case []float32:
		return a, nil
	case []float64:
		out := make([]float32, len(a))
		for i, x := range a {
			out[i] = float32(x)
		}
		return out, nil
	case []any:
		out := make([]float32, len(a))
		for i, x := range a {
			switch f := x.(type) {
			case float32:
				out[i] = f
			case float64:
				out[i] = float32(f)
			default:
				return nil, fmt.Errorf("tokenizer: %s[%d] is %T, not a float", key, i, x)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("tokenizer: %s is %T, not an array of floats", key, raw)
}

func mdInts(md map[string]any, key string) ([]int64, error) {
	raw, ok := md[key]
	if !ok {
		return nil, nil
	}
	conv := func(n int, at func(int) (int64, bool)) ([]int64, error) {
		out := make([]int64, n)
		for i := range n {
			v, ok := at(i)
			if !ok {
				return nil, fmt.Errorf("tokenizer: %s[%d] is not an integer", key, i)
			}
			out[i] = v
		}
		return out, nil
	}
	switch a := raw.(type) {
	case []int32:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []uint32:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []int64:
		return a, nil
	case []int:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []int8:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []uint8:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []int16:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []uint16:
		return conv(len(a), func(i int) (int64, bool) { return int64(a[i]), true })
	case []any:
		return conv(len(a), func(i int) (int64, bool) { return gguf.Int(a[i]) })
	}
	return nil, fmt.Errorf("tokenizer: %s is %T, not an array of integers", key, raw)
}
