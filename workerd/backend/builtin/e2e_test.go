package builtin_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/agent"
	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

// jinjaTemplate renders chats exactly as ollamatest.Template (Ollama's Go
// template the test models are created with) does for messages without
// tools: the same file served by both engines gets the same prompt.
const jinjaTemplate = `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`

// e2eCases: one file per tensor type (Q4_K is the Q4_K_M mix, with Q6_K
// output and ffn_down), plus the qwen2 variant. Seeds are chosen so that
// no greedy choice of the compared replies is a near tie (see
// engine.TestGreedyMatchesOllama) and no token repeats 30 times running
// (Ollama aborts those replies).
func e2eCases() []struct {
	name string
	o    testmodel.Options
} {
	type c = struct {
		name string
		o    testmodel.Options
	}
	k := func(seed int64, typ testmodel.TensorType, arch string) testmodel.Options {
		return testmodel.Options{Seed: seed, Type: typ, Arch: arch, Embedding: 256, FeedForward: 512, KVHeads: 2, ChatTemplate: jinjaTemplate}
	}
	return []c{
		{"f32", testmodel.Options{Seed: 9, KVHeads: 2, ChatTemplate: jinjaTemplate}},
		{"f16", testmodel.Options{Seed: 9, Type: testmodel.F16, KVHeads: 2, ChatTemplate: jinjaTemplate}},
		{"q8_0", testmodel.Options{Seed: 9, Type: testmodel.Q8_0, KVHeads: 2, ChatTemplate: jinjaTemplate}},
		{"q4_k_m", k(9, testmodel.Q4_K, "llama")},
		{"q6_k", k(6, testmodel.Q6_K, "llama")},
		{"qwen2-q4_k_m", k(12, testmodel.Q4_K, "qwen2")},
		// A byte-level BPE (gpt2) vocabulary with merges.
		{"bpe-q8_0", testmodel.Options{Seed: 9, Type: testmodel.Q8_0, KVHeads: 2, BPE: &testmodel.BPE{ChatTemplate: jinjaTemplate}}},
	}
}

// prompts include non-ASCII text: accents, CJK, emoji (byte-fallback
// tokens in these vocabularies).
var prompts = [][]openai.ChatCompletionMessageParamUnion{
	{openai.UserMessage("hello world, the cat sat on the mat")},
	{openai.SystemMessage("réponds brièvement"), openai.UserMessage("héllo wörld — 日本語 ✓ 🐱 café")},
}

func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// network runs the local network (gateway, relay, store) with one
// workerd agent over be, and returns an OpenAI client for it.
func network(t *testing.T, be backend.Backend, model string) openai.Client {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: []catalog.Model{{ID: model, Price: 10}}, Limits: devnet.ScriptedLimits(), BatchWindow: devnet.DevBatchWindow, Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	ctx := context.Background()
	key, err := stack.CreateAccount(ctx, "acct", 100000, "test-grant")
	if err != nil {
		t.Fatal(err)
	}
	tok, err := stack.IssueWorkerToken(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	_, wkey, _ := ed25519.GenerateKey(rand.Reader)
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	a := agent.New(agent.Config{RelayURL: stack.RelayURL, Token: tok, Key: wkey, Backend: be, Models: map[string]string{model: model},
		Log: testLog(t), Version: "test", DrainTimeout: 5 * time.Second})
	go func() { defer close(done); _ = a.Run(actx) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for {
		ws, err := st.IdleWorkers(ctx, model)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker did not register within 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return openai.NewClient(option.WithBaseURL(stack.APIURL+"/"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

// writeModel writes the generated file and opens the backend on it.
func writeModel(t testing.TB, name string, o testmodel.Options) *builtin.Backend {
	t.Helper()
	b, err := testmodel.Bytes(o)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".gguf")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	be, err := builtin.New(path, builtin.WithLogger(testLog(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

// TestAgainstOllama: greedy replies through the whole local network
// (OpenAI SDK → gateway → relay → workerd with the builtin backend) equal
// Ollama's on the same file, for 60 tokens, on prompts with non-ASCII
// text, one file per tensor type.
func TestAgainstOllama(t *testing.T) {
	const n = 60
	for _, c := range e2eCases() {
		t.Run(c.name, func(t *testing.T) {
			model := "tiny-" + c.name
			srv := ollamatest.TinyModel(t, model, c.o)
			be := writeModel(t, model, c.o)
			client := network(t, be, model)
			for i, msgs := range prompts {
				var om []map[string]string
				for _, m := range msgs {
					role, content := "user", ""
					if m.OfSystem != nil {
						role, content = "system", m.OfSystem.Content.OfString.Value
					} else {
						content = m.OfUser.Content.OfString.Value
					}
					om = append(om, map[string]string{"role": role, "content": content})
				}
				want := srv.GreedyChat(t, model, om, n)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: model, Messages: msgs, Temperature: openai.Float(0), MaxTokens: openai.Int(n), Seed: openai.Int(1)})
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				got := resp.Choices[0].Message.Content
				if got != want {
					t.Errorf("prompt %d: builtin and Ollama differ:\nbuiltin: %q\nollama:  %q", i, got, want)
				}
				if resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != n {
					t.Errorf("prompt %d: finish %q after %d tokens, want length after %d", i, resp.Choices[0].FinishReason, resp.Usage.CompletionTokens, n)
				}
				if len(strings.Fields(got)) < n/4 {
					t.Errorf("prompt %d: reply %q is not the generated words", i, got)
				}
			}
		})
	}
}
