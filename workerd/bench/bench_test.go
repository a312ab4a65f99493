package bench_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/backend/ollama"
	"github.com/c0mpute/c0mpute/workerd/bench"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

// check asserts what holds of every real measurement of a model that never
// stops on its own before n tokens (the generated test models).
func check(t *testing.T, r bench.Result, n int64) {
	t.Helper()
	if r.Tokens != n {
		t.Errorf("Tokens = %d, want %d (the limit: the test model never stops on its own)", r.Tokens, n)
	}
	if r.TTFT <= 0 || r.TTFT > r.Elapsed {
		t.Errorf("TTFT %v not within (0, Elapsed %v]", r.TTFT, r.Elapsed)
	}
	if want := bench.Speed(r.Tokens, r.Elapsed); r.MilliTokPerSec != want || want <= 0 {
		t.Errorf("MilliTokPerSec = %d, want %d from %d tokens in %v", r.MilliTokPerSec, want, r.Tokens, r.Elapsed)
	}
}

// TestRealOllama measures the generated tiny model on a real Ollama.
func TestRealOllama(t *testing.T) {
	s := ollamatest.TinyModel(t, "tiny:latest", testmodel.Options{Seed: 1})
	be := ollama.New(s.URL())
	r, err := bench.Run(context.Background(), be, "tiny:latest", bench.Options{MaxTokens: 16, Runs: 3})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, 16)
	t.Logf("ollama tiny: ttft %v, %d tokens in %v, %s tok/s", r.TTFT, r.Tokens, r.Elapsed, r.TokPerSec())

	if _, err := bench.Run(context.Background(), be, "absent:latest", bench.Options{}); err == nil ||
		!strings.Contains(err.Error(), "warm-up") || !strings.Contains(err.Error(), "absent:latest") {
		t.Errorf("absent model: %v, want a warm-up error naming it", err)
	}
}

// TestBuiltin measures a generated GGUF on the built-in engine.
func TestBuiltin(t *testing.T) {
	b, err := testmodel.Bytes(testmodel.Options{Seed: 9, KVHeads: 2,
		ChatTemplate: `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	be, err := builtin.New(path, builtin.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	r, err := bench.Run(context.Background(), be, "tiny", bench.Options{MaxTokens: 24, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, 24)
	t.Logf("builtin tiny: ttft %v, %d tokens in %v, %s tok/s", r.TTFT, r.Tokens, r.Elapsed, r.TokPerSec())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := bench.Run(ctx, be, "tiny", bench.Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// scripted is a backend whose reply is given by the test: for the cases a
// real model cannot be made to produce (usage that differs from the
// deltas, an empty reply, a server error quoting the prompt).
type scripted struct {
	deltas []oaiwire.Delta
	usage  int64
	err    error
	calls  int
	limits []int64
}

func (s *scripted) Name() string                             { return "scripted" }
func (s *scripted) Models(context.Context) ([]string, error) { return []string{"m"}, nil }
func (s *scripted) Chat(ctx context.Context, model string, req *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	s.calls++
	s.limits = append(s.limits, req.Limit())
	if req.Temperature == nil || *req.Temperature != 0 || len(req.Messages) != 1 || req.Messages[0].Content.Text != bench.Prompt {
		return backend.Result{}, errors.New("not the fixed greedy request")
	}
	for _, d := range s.deltas {
		if err := emit(d); err != nil {
			return backend.Result{}, err
		}
	}
	if s.err != nil {
		return backend.Result{}, s.err
	}
	return backend.Result{FinishReason: "length", Usage: oaiwire.Usage{CompletionTokens: s.usage}}, nil
}

type quoting struct{}

func (quoting) Error() string    { return "bad input: " + bench.Prompt }
func (quoting) Redacted() string { return "bad input" }

func words(n int) []oaiwire.Delta {
	d := make([]oaiwire.Delta, n)
	for i := range d {
		d[i] = oaiwire.Delta{Content: " w"}
	}
	return append([]oaiwire.Delta{{Role: "assistant"}}, d...)
}

func TestScripted(t *testing.T) {
	tests := []struct {
		name       string
		be         scripted
		opt        bench.Options
		wantTokens int64
		wantCalls  int
		wantLimit  int64
		wantErr    string
	}{
		{"usage wins over deltas", scripted{deltas: words(5), usage: 9}, bench.Options{}, 9, 2, bench.DefaultMaxTokens, ""},
		{"deltas without usage", scripted{deltas: words(7)}, bench.Options{MaxTokens: 7, Runs: 4}, 7, 5, 7, ""},
		{"role-only delta is no token", scripted{deltas: words(0), usage: 0}, bench.Options{}, 0, 1, 64, "no tokens"},
		{"server error redacted", scripted{deltas: words(1), err: quoting{}}, bench.Options{}, 0, 1, 64, "warm-up: scripted chat with m: bad input"},
		{"bad options", scripted{}, bench.Options{MaxTokens: -1}, 0, 0, 0, "MaxTokens must be 0..4096"},
		{"too many runs", scripted{}, bench.Options{Runs: 51}, 0, 0, 0, "Runs 0..50"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := bench.Run(context.Background(), &tt.be, "m", tt.opt)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want it to contain %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), bench.Prompt) {
					t.Errorf("error quotes the prompt: %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if r.Tokens != tt.wantTokens || tt.be.calls != tt.wantCalls {
				t.Errorf("tokens %d in %d calls, want %d in %d", r.Tokens, tt.be.calls, tt.wantTokens, tt.wantCalls)
			}
			for _, l := range tt.be.limits {
				if l != tt.wantLimit {
					t.Errorf("limit %d, want %d", l, tt.wantLimit)
				}
			}
		})
	}
}

func TestMedianAndSpeed(t *testing.T) {
	rs := []bench.Result{{MilliTokPerSec: 30}, {MilliTokPerSec: 10}, {MilliTokPerSec: 20}, {MilliTokPerSec: 40}}
	if got := bench.Median(rs[:3]).MilliTokPerSec; got != 20 {
		t.Errorf("median of 3: %d", got)
	}
	if got := bench.Median(rs).MilliTokPerSec; got != 20 {
		t.Errorf("median of 4: %d, want the lower middle 20", got)
	}
	if got := bench.Median(nil); got != (bench.Result{}) {
		t.Errorf("median of none: %+v", got)
	}
	for _, tt := range []struct {
		tokens int64
		d      time.Duration
		want   int64
	}{
		{65, 2 * time.Second, 32_000},
		{1, time.Second, 0},
		{10, 0, 0},
		{4, 1500 * time.Millisecond, 2_000},
	} {
		if got := bench.Speed(tt.tokens, tt.d); got != tt.want {
			t.Errorf("Speed(%d, %v) = %d, want %d", tt.tokens, tt.d, got, tt.want)
		}
	}
	if s := (bench.Result{MilliTokPerSec: 12_345}).TokPerSec(); s != "12.3" {
		t.Errorf("TokPerSec %q", s)
	}
}
