package openaicompat

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

const tinyModel = "tiny:latest"

var tiny struct {
	once sync.Once
	err  error
}

// realOllama returns the package's shared real Ollama server with the
// generated model created in it.
func realOllama(t *testing.T) *ollamatest.Server {
	t.Helper()
	s := ollamatest.Shared(t)
	tiny.once.Do(func() {
		gguf, err := testmodel.Bytes(testmodel.Options{Seed: 1})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			err = ollamatest.Create(ctx, s.URL(), tinyModel, gguf)
		}
		tiny.err = err
	})
	if tiny.err != nil {
		t.Fatalf("create model: %v", tiny.err)
	}
	return s
}

// collect runs a chat and gathers what it emitted.
type collected struct {
	Deltas []oaiwire.Delta `json:"deltas"`
	Result backend.Result  `json:"result"`
	Error  string          `json:"error,omitempty"`
}

func (c collected) content() string {
	var b bytes.Buffer
	for _, d := range c.Deltas {
		b.WriteString(d.Content)
	}
	return b.String()
}

func run(ctx context.Context, b backend.Backend, model string, req *oaiwire.ChatRequest) collected {
	var c collected
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

// golden compares v, as indented JSON, with testdata/name.
func golden(t *testing.T, name string, v any) {
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

func ptr[T any](v T) *T { return &v }

func user(text string) oaiwire.Message {
	return oaiwire.Message{Role: "user", Content: oaiwire.Content{Text: text}}
}
