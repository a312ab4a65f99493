// Package backend defines what workerd needs from an inference server, and
// its implementations live in subpackages: ollama (Ollama's native API) and
// openaicompat (any OpenAI-compatible server: llama.cpp, vLLM, LM Studio).
package backend

import (
	"context"
	"errors"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// Backend runs chat requests on a local inference server.
type Backend interface {
	// Name is the backend kind, for logs and the registration's agent
	// string ("ollama", "openai").
	Name() string
	// Models lists the model names the server can serve now.
	Models(ctx context.Context) ([]string, error)
	// Chat runs req on the server's model named model, streaming, and
	// calls emit with each increment of the reply in order. Tool calls are
	// emitted as deltas in OpenAI's streaming form: every fragment carries
	// the call's 0-based Index, and a call's first fragment carries its ID,
	// Type "function" and Function.Name. emit's error stops the request
	// and is returned. Cancelling ctx stops the request on the server.
	Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (Result, error)
}

// Digester is implemented by backends that know a digest of the weights
// behind a model name (Ollama's manifest digest). workerd puts it in each
// job's signed receipt, so a user can tell which weights served them.
type Digester interface {
	// ModelDigest is the digest of the model named model as last listed
	// by Models, or "" if the server gave none.
	ModelDigest(model string) string
}

// Capabilities is what a backend supports for one model: the gateway sends
// a worker only requests its backend can serve.
type Capabilities struct {
	Vision         bool
	Tools          bool
	ResponseFormat bool
	// Context is the context length in tokens the model runs with; 0 if
	// the backend does not know.
	Context int64
	// Image says the model renders images (Imager): it is sent image
	// jobs, and no chat.
	Image bool
}

// Capable is implemented by backends that know what their models support.
// A backend that does not is registered as plain chat only.
type Capable interface {
	// Capabilities says what model (a name as listed by Models)
	// supports.
	Capabilities(ctx context.Context, model string) (Capabilities, error)
}

// Imager is implemented by backends that render images (ComfyUI, an
// OpenAI-compatible server's image models). Models whose Capabilities say
// Image are sent image jobs through it.
type Imager interface {
	// Image renders req on the server's model named model and returns
	// the image. progress, if not nil, is called as rendering advances
	// (step of total; total 0 when the server does not say). Cancelling
	// ctx stops the rendering on the server.
	Image(ctx context.Context, model string, req ImageRequest, progress func(step, total int)) (Image, error)
}

// ImageRequest is one image to render.
type ImageRequest struct {
	Prompt        string
	Width, Height int
}

// Image is a rendered image.
type Image struct {
	// PNG is the image, PNG-encoded: what the network returns to users.
	PNG []byte
}

// Result is how a reply ended.
type Result struct {
	// FinishReason is stop, length or tool_calls.
	FinishReason string
	Usage        oaiwire.Usage
}

// Redacted is implemented by errors that carry text the inference server
// wrote. Such text may quote the prompt (validation errors often echo the
// input), so workerd logs and forwards Redacted() — the error without that
// text — instead of Error().
type Redacted interface {
	error
	Redacted() string
}

// SafeText is err's text without anything the server wrote.
func SafeText(err error) string {
	var r Redacted
	if errors.As(err, &r) {
		return r.Redacted()
	}
	return err.Error()
}
