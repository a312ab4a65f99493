package builtin

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/chattemplate"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
	"github.com/c0mpute/c0mpute/workerd/engine/tokenizer"
)

// Text is a model's text side: its tokenizer and chat template, read
// from the GGUF metadata, and its context length. It turns a chat request
// into prompt tokens (Request) and runs the generation loop (Generate)
// over any Stepper — this package's in-process pipeline, or a ring of
// workerd processes each holding a layer range (workerd/ringmember) — so
// every engine that runs a model streams, stops, caps and counts a reply
// exactly alike. A Text is read-only after NewText and safe for
// concurrent use.
type Text struct {
	tok     *tokenizer.Tokenizer
	tmpl    *chattemplate.Template
	context int
}

// NewText builds the tokenizer and chat template from a model's metadata
// (a whole GGUF file's, or the embedding blob's of a split model, which
// carries all of it). cfg is the model's shape: a tokenizer with more
// tokens than the embedding has rows is refused, and Context caps every
// reply.
func NewText(md gguf.Metadata, cfg engine.Config) (*Text, error) {
	tok, err := tokenizer.FromMetadata(md)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if tok.VocabSize() > cfg.Vocab {
		return nil, fmt.Errorf("tokenizer has %d tokens, the model %d rows", tok.VocabSize(), cfg.Vocab)
	}
	tmpl, err := chattemplate.FromMetadata(md)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	if cfg.Context <= 0 {
		return nil, fmt.Errorf("model context length %d", cfg.Context)
	}
	return &Text{tok: tok, tmpl: tmpl, context: cfg.Context}, nil
}

// DefaultTemplate reports whether the metadata had no chat template, so
// the ChatML fallback renders prompts (worth a line in the log).
func (t *Text) DefaultTemplate() bool { return t.tmpl.IsDefault() }

// Tokenize returns text's tokens as they would continue a reply: no BOS
// or EOS added, special tokens' text taken as plain text (a request's
// prediction, for drafting).
func (t *Text) Tokenize(text string) []int32 { return t.tok.Encode(text, false, false) }

// Context is the model's context length in positions: the prompt plus the
// reply never exceed it.
func (t *Text) Context() int { return t.context }

// Request renders req's chat into prompt tokens and reads its sampling
// settings, refusing (with errors wrapping ErrRequest) what the engine
// cannot serve: tools, constrained decoding, penalties, images, a bad
// sampling setting, or a prompt that leaves no room in the context.
func (t *Text) Request(req *oaiwire.ChatRequest) ([]int32, sample.Params, error) {
	prompt, err := t.prompt(req)
	if err != nil {
		return nil, sample.Params{}, err
	}
	p, err := SamplingParams(req)
	if err != nil {
		return nil, sample.Params{}, err
	}
	if len(prompt) >= t.context {
		return nil, sample.Params{}, fmt.Errorf("%w: the prompt is %d tokens, the model's context %d", ErrRequest, len(prompt), t.context)
	}
	return prompt, p, nil
}

// prompt renders the chat with the file's template and tokenizes it as
// llama.cpp's server does (special tokens parsed, BOS per the file).
func (t *Text) prompt(req *oaiwire.ChatRequest) ([]int32, error) {
	switch {
	case len(req.Tools) > 0:
		return nil, fmt.Errorf("%w: tools (the built-in engine does not parse tool calls)", ErrRequest)
	case req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text":
		return nil, fmt.Errorf("%w: response_format %q (no constrained decoding)", ErrRequest, req.ResponseFormat.Type)
	case req.PresencePenalty != nil && *req.PresencePenalty != 0, req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0:
		return nil, fmt.Errorf("%w: presence and frequency penalties", ErrRequest)
	}
	msgs := make([]chattemplate.Message, 0, len(req.Messages))
	for i, m := range req.Messages {
		if len(m.Content.Images()) > 0 {
			return nil, fmt.Errorf("%w: messages[%d] has an image (text models only)", ErrRequest, i)
		}
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return nil, fmt.Errorf("%w: messages[%d]: tool calls", ErrRequest, i)
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msgs = append(msgs, chattemplate.Message{Role: role, Content: m.Content.String(), Name: m.Name})
	}
	text, err := t.tmpl.Render(msgs, chattemplate.Options{AddGenerationPrompt: true, TrimBOS: t.tok.AddBOS()})
	if err != nil {
		return nil, fmt.Errorf("builtin: chat template: %w", err)
	}
	toks := t.tok.Encode(text, true, true)
	if len(toks) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrRequest)
	}
	return toks, nil
}

// SamplingParams reads a request's sampling settings with OpenAI's
// defaults: temperature 1, top_p 1, a random seed unless one is given
// (drawn here, so whoever samples — this process or a ring's last stage —
// gets the same seed). The parameters are checked as sample.New checks
// them.
func SamplingParams(req *oaiwire.ChatRequest) (sample.Params, error) {
	p := sample.Params{Temperature: 1, TopP: 1}
	if req.Temperature != nil {
		p.Temperature = float32(*req.Temperature)
	}
	if req.TopP != nil {
		// sample's TopP 0 means "no filter"; OpenAI's top_p 0 means "only
		// the most likely token", which a tiny positive value keeps.
		p.TopP = max(float32(*req.TopP), 1e-6)
	}
	if req.Seed != nil {
		p.Seed = uint64(*req.Seed)
	} else {
		var s [8]byte
		_, _ = rand.Read(s[:])
		p.Seed = binary.LittleEndian.Uint64(s[:])
	}
	if _, err := sample.New(p); err != nil {
		return sample.Params{}, fmt.Errorf("%w: sampling: %w", ErrRequest, err)
	}
	return p, nil
}

// Stepper is the model side of a generation. Next runs tokens through the
// model, continuing the sequence (the prompt first, then each token Next
// returned, one at a time), and returns the token that follows them,
// sampled with the request's settings.
type Stepper interface {
	Next(ctx context.Context, tokens []int32) (int32, error)
}

// MultiStepper is a Stepper that may return several tokens a step (a ring
// that verifies drafted tokens in one loop). NextN runs tokens as Next
// does and returns the tokens that follow them, at least one and at most
// limit, in order: every one but the last is in the model's cache
// already, so the caller's next input is the last alone.
type MultiStepper interface {
	Stepper
	NextN(ctx context.Context, tokens []int32, limit int) ([]int32, error)
}

// taker is a MultiStepper told how many of a step's tokens the reply took
// when it ended inside them (an end token, a stop string, the limit, or
// an emit that failed): Took(n), n < the step's count.
type taker interface {
	Took(n int)
}

// Generate runs the token loop for a prompt Request returned: it steps
// until an end-of-generation token, a stop string, max_tokens or the
// context's end, streams the decoded text through emit (stop strings
// never shown, not even in part), and returns the finish reason and
// usage. Errors from step and emit are returned as they are.
func (t *Text) Generate(ctx context.Context, step Stepper, prompt []int32, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	limit := req.Limit()
	if limit <= 0 || limit > int64(t.context-len(prompt)) {
		limit = int64(t.context - len(prompt)) // the context is the hard cap
	}
	dec := t.tok.NewDecoder()
	stop := sample.NewStopper(req.Stop)
	res := backend.Result{FinishReason: "length", Usage: oaiwire.Usage{PromptTokens: int64(len(prompt))}}
	send := func(text string) error {
		if text == "" {
			return nil
		}
		return emit(oaiwire.Delta{Content: text})
	}
	multi, _ := step.(MultiStepper)
	input := prompt
	ids := make([]int32, 1)
	var err error
loop:
	for res.Usage.CompletionTokens < limit {
		if multi != nil {
			ids, err = multi.NextN(ctx, input, int(min(limit-res.Usage.CompletionTokens, math.MaxInt32)))
			if err == nil && len(ids) == 0 {
				err = errors.New("builtin: a step returned no token")
			}
		} else {
			ids[0], err = step.Next(ctx, input)
		}
		if err != nil {
			return backend.Result{}, err
		}
		took := func(n int) {
			if tk, ok := step.(taker); ok && n < len(ids) {
				tk.Took(n)
			}
		}
		for i, id := range ids {
			if res.Usage.CompletionTokens == limit {
				took(i)
				break loop
			}
			res.Usage.CompletionTokens++
			if t.tok.IsEOG(id) {
				res.FinishReason = "stop"
				took(i + 1)
				break loop
			}
			out, stopped := stop.Add(dec.Add(id))
			if err := send(out); err != nil {
				took(i)
				return backend.Result{}, err
			}
			if stopped {
				res.FinishReason = "stop"
				took(i + 1)
				break loop
			}
		}
		input = ids[len(ids)-1:]
	}
	if !stop.Stopped() {
		out, stopped := stop.Add(dec.Flush())
		if stopped {
			res.FinishReason = "stop"
		} else {
			out += stop.Flush()
		}
		if err := send(out); err != nil {
			return backend.Result{}, err
		}
	}
	res.Usage.TotalTokens = res.Usage.PromptTokens + res.Usage.CompletionTokens
	return res, nil
}

// pipelineStepper is the built-in backend's Stepper: the whole model in
// this process, and the request's sampler.
type pipelineStepper struct {
	pipe *engine.Pipeline
	smp  *sample.Sampler
}

func (p *pipelineStepper) Next(ctx context.Context, tokens []int32) (int32, error) {
	logits, err := p.pipe.Next(ctx, tokens)
	if err != nil {
		return 0, fmt.Errorf("builtin: %w", err)
	}
	return p.smp.Sample(logits), nil
}
