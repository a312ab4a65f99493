// Package builtin is workerd's backend on its own engine
// (workerd/engine): it serves one GGUF file, memory-mapped, with the
// file's tokenizer and chat template, on the CPU, with no inference
// server to install.
//
// The model id is the file name without ".gguf" unless WithModelID says
// otherwise. Requests run one at a time (a second waits, or gives up
// when its context ends); a single generation already uses every core.
//
// Supported request fields: messages (text), max_tokens /
// max_completion_tokens, stop, temperature, top_p, seed. There is no
// repetition penalty (OpenAI's presence and frequency penalties are
// refused unless 0), tools and images are refused with a clear error,
// and response_format other than "text" is refused: the engine has no
// constrained decoding.
package builtin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
)

// Name is the backend kind.
const Name = "builtin"

// Backend serves one GGUF model with the built-in engine.
type Backend struct {
	id    string
	file  *gguf.File
	model *engine.Model
	text  *Text
	log   *slog.Logger
	busy  chan struct{} // one generation at a time; Close takes it for good
	// closed is closed by Close, which closeOnce guards.
	closed    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

type options struct {
	id      string
	workers int
	log     *slog.Logger
}

// Option configures New.
type Option func(*options)

// WithModelID sets the model id served (default: the file name without
// ".gguf").
func WithModelID(id string) Option { return func(o *options) { o.id = id } }

// WithWorkers sets how many goroutines a matrix product uses (default
// GOMAXPROCS).
func WithWorkers(n int) Option { return func(o *options) { o.workers = n } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// ModelID is the id a file is served under by default: its name without
// the directory and the ".gguf" extension.
func ModelID(path string) string {
	return strings.TrimSuffix(filepath.Base(path), ".gguf")
}

// New opens and maps the GGUF file at path and prepares its tokenizer
// and chat template. Close releases the mapping.
func New(path string, opts ...Option) (*Backend, error) {
	o := options{id: ModelID(path), log: slog.Default()}
	for _, f := range opts {
		f(&o)
	}
	if o.id == "" {
		return nil, fmt.Errorf("builtin: empty model id for %s", path)
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("builtin: %w", err)
	}
	b, err := newBackend(f, o)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("builtin: %s: %w", path, err)
	}
	return b, nil
}

func newBackend(f *gguf.File, o options) (*Backend, error) {
	m, err := engine.Load(f, o.workers)
	if err != nil {
		return nil, err
	}
	text, err := NewText(f.Metadata, m.Config())
	if err != nil {
		return nil, err
	}
	if text.DefaultTemplate() {
		o.log.Info("builtin: the model file has no chat template; using the ChatML fallback", "model", o.id)
	}
	c := m.Config()
	o.log.Info("builtin: model loaded", "model", o.id, "arch", c.Arch, "layers", c.Layers, "hidden", c.Embd, "vocab", c.Vocab, "context", c.Context)
	return &Backend{id: o.id, file: f, model: m, text: text, log: o.log, busy: make(chan struct{}, 1), closed: make(chan struct{})}, nil
}

// ErrClosed is returned by Chat after Close.
var ErrClosed = errors.New("builtin: backend closed")

// Close waits for a running generation to end, then unmaps the model
// file; later Chats fail with ErrClosed.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		b.busy <- struct{}{} // never released: no generation starts again
		b.closeErr = b.file.Close()
	})
	return b.closeErr
}

// Name is "builtin".
func (b *Backend) Name() string { return Name }

// Model is the loaded model (for its shape and the sharding API).
func (b *Backend) Model() *engine.Model { return b.model }

// Models lists the one model served.
func (b *Backend) Models(context.Context) ([]string, error) { return []string{b.id}, nil }

// Capabilities: plain chat, with the file's context length (no tool-call
// parsing, no constrained decoding, no vision tower).
func (b *Backend) Capabilities(context.Context, string) (backend.Capabilities, error) {
	return backend.Capabilities{Context: int64(b.model.Config().Context)}, nil
}

// ErrRequest is wrapped by errors about requests the backend cannot serve.
var ErrRequest = errors.New("builtin: unsupported request")

// Chat generates a reply; see backend.Backend.
func (b *Backend) Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	if model != b.id {
		return backend.Result{}, fmt.Errorf("%w: model %q is not served (this backend serves %q)", ErrRequest, model, b.id)
	}
	prompt, params, err := b.text.Request(req)
	if err != nil {
		return backend.Result{}, err
	}
	smp, err := sample.New(params)
	if err != nil {
		return backend.Result{}, fmt.Errorf("%w: sampling: %w", ErrRequest, err)
	}
	select {
	case b.busy <- struct{}{}:
		defer func() { <-b.busy }()
	case <-ctx.Done():
		return backend.Result{}, ctx.Err()
	case <-b.closed:
		return backend.Result{}, ErrClosed
	}
	select {
	case <-b.closed: // Close began while this request waited
		return backend.Result{}, ErrClosed
	default:
	}
	start := time.Now()
	pipe, err := b.model.NewPipeline(nil)
	if err != nil {
		return backend.Result{}, err
	}
	res, err := b.text.Generate(ctx, &pipelineStepper{pipe: pipe, smp: smp}, prompt, req, emit)
	if err != nil {
		return backend.Result{}, err
	}
	el := time.Since(start)
	b.log.Debug("builtin: generated", "model", b.id, "prompt_tokens", len(prompt), "tokens", res.Usage.CompletionTokens,
		"finish", res.FinishReason, "tok_per_s", float64(res.Usage.CompletionTokens)/el.Seconds())
	return res, nil
}
