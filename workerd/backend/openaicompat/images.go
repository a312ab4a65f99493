package openaicompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// WithImageModels names the server's image models (by the names /v1/models
// lists): an OpenAI-compatible server does not say which of its models
// render images. Their Capabilities say Image, and Image sends them to the
// server's POST /v1/images/generations.
func WithImageModels(names ...string) Option {
	return func(b *Backend) {
		if b.images == nil {
			b.images = map[string]bool{}
		}
		for _, n := range names {
			b.images[n] = true
		}
	}
}

// maxImageAnswer bounds an images answer: the largest image the network
// relays, base64-encoded, and room for the envelope.
const maxImageAnswer = relaymsg.MaxImageBytes/3*4 + 64<<10

// Image renders req on the server's image model named model with POST
// /v1/images/generations (one image, b64_json). The server reports no
// progress, so progress is not called.
func (b *Backend) Image(ctx context.Context, model string, req backend.ImageRequest, _ func(step, total int)) (backend.Image, error) {
	if !b.images[model] {
		return backend.Image{}, fmt.Errorf("openai backend: %s is not one of the image models this worker was given", model)
	}
	payload, err := json.Marshal(map[string]any{"model": model, "prompt": req.Prompt, "n": 1,
		"size": fmt.Sprintf("%dx%d", req.Width, req.Height), "response_format": "b64_json"})
	if err != nil {
		return backend.Image{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, b.base+"/images/generations", bytes.NewReader(payload))
	if err != nil {
		return backend.Image{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := b.do(hreq)
	if err != nil {
		return backend.Image{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxImageAnswer+1))
	if err != nil {
		return backend.Image{}, fmt.Errorf("openai backend: read the image: %w", err)
	}
	if len(raw) > maxImageAnswer {
		return backend.Image{}, fmt.Errorf("openai backend: the images answer is over %d bytes", maxImageAnswer)
	}
	var out struct {
		Data []struct {
			B64JSON string `json:"b64_json"`
			URL     string `json:"url"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return backend.Image{}, fmt.Errorf("openai backend: the images answer is not OpenAI's JSON: %w", err)
	}
	switch {
	case len(out.Data) == 0:
		return backend.Image{}, errors.New("openai backend: the images answer holds no image")
	case out.Data[0].B64JSON == "":
		return backend.Image{}, errors.New("openai backend: the images answer has no b64_json (the server ignored response_format)")
	}
	img, err := base64.StdEncoding.DecodeString(out.Data[0].B64JSON)
	if err != nil {
		return backend.Image{}, fmt.Errorf("openai backend: the image is not base64: %w", err)
	}
	if len(img) > relaymsg.MaxImageBytes {
		return backend.Image{}, fmt.Errorf("openai backend: an image of %d bytes is over the network's %d", len(img), relaymsg.MaxImageBytes)
	}
	return backend.Image{PNG: img}, nil
}

var _ backend.Imager = (*Backend)(nil)
