package chattemplate

import (
	"fmt"
	"strings"

	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
)

// Metadata keys read by FromMetadata.
const (
	KeyTemplate       = "tokenizer.chat_template"
	keyTemplatePrefix = "tokenizer.chat_template."
)

// FromMetadata returns the chat template a GGUF file carries
// (tokenizer.chat_template; its "tool_use" variant, when present, is used
// for requests with tools), or Default when it has none. bos_token and
// eos_token are the texts of tokenizer.ggml.bos_token_id and
// eos_token_id, with llama.cpp's default ids when those are absent.
func FromMetadata(md map[string]any) (*Template, error) {
	bos, eos, err := specialTexts(md)
	if err != nil {
		return nil, err
	}
	raw, ok := md[KeyTemplate]
	if !ok {
		return Default(bos, eos), nil
	}
	src, ok := raw.(string)
	if !ok {
		return nil, fmt.Errorf("chattemplate: %s is %T, not a string", KeyTemplate, raw)
	}
	if strings.TrimSpace(src) == "" {
		return Default(bos, eos), nil
	}
	t, err := New(src, bos, eos)
	if err != nil {
		return nil, err
	}
	if raw, ok := md[keyTemplatePrefix+"tool_use"]; ok {
		if s, ok := raw.(string); ok && strings.TrimSpace(s) != "" {
			if t.toolUse, err = New(s, bos, eos); err != nil {
				return nil, fmt.Errorf("chattemplate: tool_use variant: %w", err)
			}
		}
	}
	return t, nil
}

func specialTexts(md map[string]any) (bos, eos string, err error) {
	var toks []string
	switch a := md["tokenizer.ggml.tokens"].(type) {
	case nil:
	case []string:
		toks = a
	case []any:
		for _, x := range a {
			s, _ := x.(string)
			toks = append(toks, s)
		}
	default:
		return "", "", fmt.Errorf("chattemplate: tokenizer.ggml.tokens is %T, not an array of strings", a)
	}
	model, _ := md["tokenizer.ggml.model"].(string)
	bosID, eosID := int64(-1), int64(-1)
	switch model {
	case "llama":
		bosID, eosID = 1, 2
	case "gpt2":
		bosID, eosID = 11, 11
	}
	if n, ok := gguf.Int(md["tokenizer.ggml.bos_token_id"]); ok {
		bosID = n
	}
	if n, ok := gguf.Int(md["tokenizer.ggml.eos_token_id"]); ok {
		eosID = n
	}
	text := func(id int64) string {
		if id >= 0 && id < int64(len(toks)) {
			return toks[id]
		}
		return ""
	}
	return text(bosID), text(eosID), nil
}
