package devnet_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/testenv"
)

// nodeSDKTests is how many tests infra/sdktest/node/sdk.test.mjs has; the
// run must report at least this many passing.
const nodeSDKTests = 13

// nodeSDKRate is the per-key rate limit during the run: above what the
// main key spends (about ten requests), low enough that the rate-limit
// test reaches it quickly on its own key.
const nodeSDKRate = 20

// sdkCase is one request of the JS tests (without model) and the reply the
// backend gives it directly.
type sdkCase struct {
	Request          map[string]any `json:"request"`
	Content          string         `json:"content"`
	FinishReason     string         `json:"finish_reason"`
	PromptTokens     int64          `json:"prompt_tokens"`
	CompletionTokens int64          `json:"completion_tokens"`
}

// sdkExpect is the C0MPUTE_EXPECT_JSON document.
type sdkExpect struct {
	Cases         map[string]sdkCase `json:"cases"`
	PriceCredits  int64              `json:"price_credits"`
	PoorKey       string             `json:"poor_key"`    // an account with no credits
	LimitedKey    string             `json:"limited_key"` // a key of its own for the rate limit
	RatePerMinute int64              `json:"rate_per_minute"`
}

// TestNodeSDK runs the official OpenAI Node SDK (npm openai, pinned in
// infra/sdktest/node) unchanged against the whole local network: replies
// must be what the same Ollama answers directly, and errors must map to
// the SDK's classes.
func TestNodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "no node on PATH")
	}
	root := moduleRoot(t)
	dir := filepath.Join(root, "infra", "sdktest", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai", "package.json")); err != nil {
		testenv.Missing(t, "the openai npm package", "run scripts/test (npm ci in infra/sdktest/node)")
	}

	limits := devnet.ScriptedLimits()
	limits.RatePerMinute = nodeSDKRate
	e := newEnv(t, envOptions{credits: 10_000, limits: &limits})
	_, srv := e.ollamaWorker()
	ctx := context.Background()

	exp := sdkExpect{Cases: map[string]sdkCase{}, PriceCredits: e.stack.Catalog.Models()[0].Price, RatePerMinute: nodeSDKRate}
	if exp.PoorKey, err = e.stack.CreateAccount(ctx, "acct-node-poor", 0, ""); err != nil {
		t.Fatal(err)
	}
	if exp.LimitedKey, err = e.stack.CreateAccount(ctx, "acct-node-limited", 1000, "grant-limited"); err != nil {
		t.Fatal(err)
	}

	// The expected replies, from the same Ollama on its own endpoint.
	direct := openai.NewClient(option.WithBaseURL(srv.URL()+"/v1/"), option.WithAPIKey("ollama"), option.WithMaxRetries(0))
	ask := func(name string, req map[string]any) sdkCase {
		t.Helper()
		body := map[string]any{"model": tinyModel}
		for k, v := range req {
			body[k] = v
		}
		var res openai.ChatCompletion
		if err := direct.Post(ctx, "chat/completions", body, &res); err != nil {
			t.Fatalf("backend, case %s: %v", name, err)
		}
		if len(res.Choices) != 1 {
			t.Fatalf("backend, case %s: %d choices", name, len(res.Choices))
		}
		c := sdkCase{Request: req, Content: res.Choices[0].Message.Content, FinishReason: res.Choices[0].FinishReason,
			PromptTokens: res.Usage.PromptTokens, CompletionTokens: res.Usage.CompletionTokens}
		exp.Cases[name] = c
		return c
	}
	request := func(prompt string, maxTokens int) map[string]any {
		return map[string]any{
			"messages":    []map[string]string{{"role": "system", "content": "be brief"}, {"role": "user", "content": prompt}},
			"max_tokens":  maxTokens,
			"temperature": 0,
			"seed":        42,
		}
	}
	for name, prompt := range map[string]string{"basic": "hello world", "unicode": "grüße aus köln — ünïcödé ✓",
		"helper": "the cat sat on the mat"} {
		if c := ask(name, request(prompt, 24)); c.Content == "" {
			t.Fatalf("backend, case %s: empty reply", name)
		}
	}
	if c := ask("length", request("hello world", 5)); c.FinishReason != "length" || c.CompletionTokens != 5 {
		t.Fatalf("backend, case length: finish_reason %q after %d tokens; the model must run to max_tokens", c.FinishReason, c.CompletionTokens)
	}
	full := ask("full", request("hello world", 30))
	delete(exp.Cases, "full")
	stop := stopWord(full.Content)
	if stop == "" {
		t.Fatalf("no stop word to pick from %q", full.Content)
	}
	stopReq := request("hello world", 30)
	stopReq["stop"] = []string{stop}
	if c := ask("stop", stopReq); c.FinishReason != "stop" || !strings.HasPrefix(full.Content, c.Content) || c.Content == full.Content {
		t.Fatalf("backend, stop %q: %q (%s) from full %q", stop, c.Content, c.FinishReason, full.Content)
	}

	b, err := json.MarshalIndent(exp, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	expectPath := filepath.Join(t.TempDir(), "expect.json")
	if err := os.WriteFile(expectPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(runCtx, node, "--test", "--test-reporter=tap", "sdk.test.mjs")
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(withoutOpenAIEnv(os.Environ()),
		"OPENAI_BASE_URL="+e.stack.APIURL,
		"OPENAI_API_KEY="+e.apiKey,
		"C0MPUTE_MODEL="+tinyModel,
		"C0MPUTE_EXPECT_JSON="+expectPath,
		"NO_PROXY=127.0.0.1,localhost",
		"no_proxy=127.0.0.1,localhost",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	pass, fail := tapCount(out, "pass"), tapCount(out, "fail")
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		t.Fatalf("node --test did not finish in 2 minutes; output:\n%s", out)
	}
	if err != nil || fail != 0 || pass < nodeSDKTests {
		t.Fatalf("node --test sdk.test.mjs: %v; pass %d (want >= %d), fail %d; output:\n%s", err, pass, nodeSDKTests, fail, out)
	}
	t.Logf("node SDK: %d tests passed in %s", pass, time.Since(start).Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("node output:\n%s", out)
	}
}

// stopWord picks a word of the reply, after the third, whose first
// occurrence is that word (not a piece of an earlier one), so stopping on
// it leaves a reply of a few words.
func stopWord(reply string) string {
	words := strings.Fields(reply)
	for i := 3; i < len(words); i++ {
		at := strings.Index(reply, words[i])
		if at > 0 && len(strings.Fields(reply[:at])) >= i {
			return words[i]
		}
	}
	return ""
}

var tapSummary = regexp.MustCompile(`(?m)^# (pass|fail) (\d+)$`)

// tapCount reads "# pass N" or "# fail N" from node's TAP summary; -1 if
// absent.
func tapCount(out []byte, what string) int {
	n := -1
	for _, m := range tapSummary.FindAllSubmatch(out, -1) {
		if string(m[1]) == what {
			n, _ = strconv.Atoi(string(m[2]))
		}
	}
	return n
}

// withoutOpenAIEnv drops OPENAI_* variables of the caller's environment
// (organisation, project, log level…) so only what the test sets reaches
// the SDK.
func withoutOpenAIEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OPENAI_") {
			out = append(out, kv)
		}
	}
	return out
}

// moduleRoot is the directory of go.mod above the working directory.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}
