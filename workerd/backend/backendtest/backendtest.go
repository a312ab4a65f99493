// Package backendtest is what the tests of workerd backends share:
// running a chat and collecting what it emitted, and golden files.
package backendtest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Collected is what a chat emitted and how it ended.
type Collected struct {
	Deltas []oaiwire.Delta `json:"deltas"`
	Result backend.Result  `json:"result"`
	Error  string          `json:"error,omitempty"`
}

// Content is the deltas' content, joined.
func (c Collected) Content() string {
	var b bytes.Buffer
	for _, d := range c.Deltas {
		b.WriteString(d.Content)
	}
	return b.String()
}

// Run runs a chat and gathers what it emitted.
func Run(ctx context.Context, b backend.Backend, model string, req *oaiwire.ChatRequest) Collected {
	var c Collected
	res, err := b.Chat(ctx, model, req, func(d oaiwire.Delta) error {
		c.Deltas = append(c.Deltas, d)
		return nil
	})
	c.Result = res
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

// Golden compares v, as indented JSON, with testdata/name; with -update
// it first writes v there.
func Golden(t testing.TB, name string, v any) {
	t.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden:\n got %s\nwant %s", path, got, want)
	}
}

// User is a user message of text.
func User(text string) oaiwire.Message {
	return oaiwire.Message{Role: "user", Content: oaiwire.Content{Text: text}}
}
