package setup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Bounds on what Ollama sends. A progress line is about 150 bytes; /api/show
// without verbose leaves out the tokenizer's arrays, so its answer is the
// template, the license and a few hundred metadata keys.
const (
	maxOllamaLine = 64 << 10
	maxOllamaBody = 8 << 20
)

// ollamaClient is the part of Ollama's API setup uses (docs/api.md of
// github.com/ollama/ollama): version, pull, create, show and tags.
type ollamaClient struct {
	base string
	hc   *http.Client
}

// Progress is one line of a pull's or create's stream.
type Progress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Version is GET /api/version: a running server answers it.
func (o ollamaClient) Version(ctx context.Context) (string, error) {
	var v struct {
		Version string `json:"version"`
	}
	if err := o.call(ctx, http.MethodGet, "/api/version", nil, &v); err != nil {
		return "", err
	}
	return v.Version, nil
}

// Pull is POST /api/pull, streaming: fn sees every progress line.
func (o ollamaClient) Pull(ctx context.Context, model string, insecure bool, fn func(Progress)) error {
	return o.stream(ctx, "/api/pull", map[string]any{"model": model, "insecure": insecure, "stream": true}, fn)
}

// Create is POST /api/create from an existing model with parameters (the
// request shape of Ollama 0.5.5 and later: model, from, parameters).
func (o ollamaClient) Create(ctx context.Context, model, from string, params map[string]any, fn func(Progress)) error {
	return o.stream(ctx, "/api/create", map[string]any{"model": model, "from": from, "parameters": params, "stream": true}, fn)
}

// ShowInfo is what setup reads of POST /api/show.
type ShowInfo struct {
	Parameters string         `json:"parameters"`
	ModelInfo  map[string]any `json:"model_info"`
}

// Show is POST /api/show.
func (o ollamaClient) Show(ctx context.Context, model string) (ShowInfo, error) {
	var s ShowInfo
	err := o.call(ctx, http.MethodPost, "/api/show", map[string]any{"model": model}, &s)
	return s, err
}

// Size is the model's size on disk in bytes (its weights, template and
// parameters), from GET /api/tags.
func (o ollamaClient) Size(ctx context.Context, model string) (int64, error) {
	var tags struct {
		Models []struct {
			Name  string `json:"name"`
			Model string `json:"model"`
			Size  int64  `json:"size"`
		} `json:"models"`
	}
	if err := o.call(ctx, http.MethodGet, "/api/tags", nil, &tags); err != nil {
		return 0, err
	}
	want := withTag(model)
	for _, m := range tags.Models {
		if m.Name == want || m.Model == want {
			if m.Size <= 0 {
				return 0, fmt.Errorf("ollama lists %s with size %d", model, m.Size)
			}
			return m.Size, nil
		}
	}
	return 0, fmt.Errorf("ollama does not list %s after pulling it", model)
}

// withTag adds ":latest" to a model name without a tag, as Ollama lists it.
func withTag(name string) string {
	slash := strings.LastIndex(name, "/")
	if !strings.Contains(name[slash+1:], ":") {
		return name + ":latest"
	}
	return name
}

func (o ollamaClient) request(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(o.base, "/")+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("ollama %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(b))
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		return nil, fmt.Errorf("ollama %s: status %d: %s", path, resp.StatusCode, clip(msg))
	}
	return resp, nil
}

func (o ollamaClient) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := o.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxOllamaBody+1))
	if err != nil {
		return fmt.Errorf("ollama %s: %w", path, err)
	}
	if len(b) > maxOllamaBody {
		return fmt.Errorf("ollama %s: the answer is over %d bytes", path, maxOllamaBody)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("ollama %s: not Ollama's JSON: %v", path, err)
	}
	return nil
}

// stream posts body and calls fn with each JSON line of the answer; a line
// with "error" ends it with that error, and the stream must end with
// status "success".
func (o ollamaClient) stream(ctx context.Context, path string, body any, fn func(Progress)) error {
	resp, err := o.request(ctx, http.MethodPost, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readProgress(resp.Body, path, fn)
}

// readProgress reads a stream of JSON progress lines, each at most
// maxOllamaLine bytes.
func readProgress(r io.Reader, path string, fn func(Progress)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxOllamaLine)
	last := ""
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var p Progress
		if err := json.Unmarshal(line, &p); err != nil {
			return fmt.Errorf("ollama %s: a progress line is not JSON: %v", path, err)
		}
		if p.Error != "" {
			return fmt.Errorf("ollama %s: %s", path, clip(p.Error))
		}
		if p.Total < 0 || p.Completed < 0 || p.Completed > p.Total && p.Total > 0 {
			return fmt.Errorf("ollama %s: progress %d of %d", path, p.Completed, p.Total)
		}
		last = p.Status
		fn(p)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("ollama %s: a progress line is over %d bytes", path, maxOllamaLine)
		}
		return fmt.Errorf("ollama %s: %w", path, err)
	}
	if last != "success" {
		return fmt.Errorf("ollama %s: the stream ended before success (last status %q)", path, last)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
