package setup

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/hardware"
)

func TestRecommend(t *testing.T) {
	models := []CatalogModel{
		{ID: "small", Ollama: "s:1b", MemoryMiB: 2000},
		{ID: "mid", Ollama: "m:8b", MemoryMiB: 8000},
		{ID: "busy", Ollama: "b:8b", MemoryMiB: 8000},
		{ID: "big", Ollama: "b:70b", MemoryMiB: 48000},
		{ID: "bigger", Ollama: "b:405b", MemoryMiB: 240000},
		{ID: "image", MemoryMiB: 1000},
	}
	for _, tc := range []struct {
		name     string
		st       Stats
		mem      int64
		ranked   []string
		tooBig   []string
		noOllama []string
	}{
		{name: "idle network: the bigger model first", mem: 24000, ranked: []string{"busy", "mid", "small"},
			tooBig: []string{"big", "bigger"}, noOllama: []string{"image"}},
		{name: "a queue with no workers comes first", mem: 24000,
			st:     Stats{WorkersByModel: map[string]int64{"busy": 1, "mid": 4}, QueueByModel: map[string]int64{"small": 3, "busy": 2}},
			ranked: []string{"small", "busy", "mid"}, tooBig: []string{"big", "bigger"}, noOllama: []string{"image"}},
		{name: "workers relative to queue", mem: 300000,
			// need: big (9+1)/(4+1)=2, busy (1+1)/(0+1)=2 (bigger model
			// first on a tie), mid 1, bigger 1/3, small 1/2.
			st:     Stats{WorkersByModel: map[string]int64{"big": 4, "bigger": 2, "small": 1}, QueueByModel: map[string]int64{"big": 9, "busy": 1}},
			ranked: []string{"big", "busy", "mid", "small", "bigger"}, noOllama: []string{"image"}},
		{name: "nothing fits", mem: 1000, tooBig: []string{"small", "busy", "mid", "big", "bigger"}, noOllama: []string{"image"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Recommend(models, tc.st, tc.mem)
			ids := func(cs []Candidate) []string {
				var out []string
				for _, c := range cs {
					out = append(out, c.ID)
				}
				return out
			}
			if got := ids(r.Ranked); !reflect.DeepEqual(got, tc.ranked) {
				t.Errorf("ranked %v, want %v", got, tc.ranked)
			}
			if got := ids(r.TooBig); !reflect.DeepEqual(got, tc.tooBig) {
				t.Errorf("too big %v, want %v", got, tc.tooBig)
			}
			if !reflect.DeepEqual(r.NoOllama, tc.noOllama) {
				t.Errorf("no ollama %v, want %v", r.NoOllama, tc.noOllama)
			}
		})
	}
}

// llama3 8B's metadata as /api/show reports it (Ollama's docs/api.md).
var llama8B = map[string]any{"general.architecture": "llama", "llama.attention.head_count": 32.0,
	"llama.attention.head_count_kv": 8.0, "llama.block_count": 32.0, "llama.context_length": 8192.0,
	"llama.embedding_length": 4096.0}

func TestShapeAndNumCtx(t *testing.T) {
	s, err := ShapeFromInfo(llama8B)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Shape{Arch: "llama", TrainedContext: 8192, Layers: 32, KVHeads: 8, KeyLength: 128, ValueLength: 128}); s != want {
		t.Fatalf("shape %+v, want %+v", s, want)
	}
	// 32 layers × 8 heads × 256 values: 128 KiB a token at f16, 68 KiB at q8_0.
	if f16, q8 := s.KVBytesPerToken("f16"), s.KVBytesPerToken("q8_0"); f16 != 131072 || q8 != 69632 {
		t.Errorf("KV bytes a token: f16 %d, q8_0 %d", f16, q8)
	}
	const weights = 4_920_000_000 // llama3:8b Q4_0
	for _, tc := range []struct {
		name    string
		freeMiB int64
		kv      string
		want    int64
		wantErr string
	}{
		{name: "24 GiB: the trained context", freeMiB: 24000, kv: "f16", want: 8192},
		{name: "6 GiB f16: memory limits", freeMiB: 6144, kv: "f16", want: 6656},
		{name: "6 GiB q8_0: longer", freeMiB: 6144, kv: "q8_0", want: 8192},
		{name: "5.5 GiB", freeMiB: 5632, kv: "f16", want: 2816},
		{name: "weights only", freeMiB: 5400, kv: "f16", wantErr: "5.3 GiB free holds the weights (4.6 GiB) but not a 2048-token context (88.1 MiB more): free memory, or pick a smaller model"},
		{name: "not even the weights", freeMiB: 4000, kv: "f16", wantErr: "the weights (4.6 GiB) need more than the 3.9 GiB free, less 10% headroom: free memory, or pick a smaller model"},
	} {
		got, err := NumCtx(tc.freeMiB, weights, s, tc.kv)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("%s: %d, %v; want error %q", tc.name, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	for _, info := range []map[string]any{{}, {"general.architecture": "llama"}, {"general.architecture": "llama", "llama.context_length": -1.0}} {
		if _, err := ShapeFromInfo(info); err == nil {
			t.Errorf("%v: no error", info)
		}
	}
}

func TestDeriveAPIURL(t *testing.T) {
	for in, want := range map[string]string{
		"wss://relay.c0mpute.example/":      "https://api.c0mpute.example/v1",
		"ws://relay.lan:8080":               "http://api.lan:8080/v1",
		"wss://abc.execute-api.aws.com/dev": "",
		"ws://127.0.0.1:4000":               "",
		"::":                                "",
	} {
		if got := DeriveAPIURL(in); got != want {
			t.Errorf("DeriveAPIURL(%q) = %q, want %q", in, got, want)
		}
	}
}

type scriptedRunner map[string]string

func (s scriptedRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	out, ok := s[name+" "+strings.Join(args, " ")]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, hardware.ErrNotFound)
	}
	return []byte(out), nil
}

func TestDetectServer(t *testing.T) {
	const show = "systemctl show ollama.service --property=LoadState,ActiveState,Environment"
	ctx := context.Background()
	for _, tc := range []struct {
		name, goos, url string
		run             scriptedRunner
		want            ServerSettings
	}{
		{name: "systemd with both", goos: "linux", url: "http://127.0.0.1:11434",
			run:  scriptedRunner{show: "LoadState=loaded\nActiveState=active\nEnvironment=\"PATH=/usr/bin:/bin\" OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0\n"},
			want: ServerSettings{Known: true, Where: "systemd", FlashAttention: true, KVCacheType: "q8_0"}},
		{name: "systemd without", goos: "linux", url: "http://localhost:11434",
			run:  scriptedRunner{show: "LoadState=loaded\nActiveState=active\nEnvironment=OLLAMA_HOST=0.0.0.0\n"},
			want: ServerSettings{Known: true, Where: "systemd"}},
		{name: "no unit", goos: "linux", url: "http://127.0.0.1:11434",
			run:  scriptedRunner{show: "LoadState=not-found\nActiveState=inactive\nEnvironment=\n"},
			want: ServerSettings{Why: "Ollama is not running as the ollama systemd service (started by hand?)"}},
		{name: "launchd", goos: "darwin", url: "http://127.0.0.1:11434",
			run:  scriptedRunner{"launchctl getenv OLLAMA_FLASH_ATTENTION": "1\n", "launchctl getenv OLLAMA_KV_CACHE_TYPE": "\n"},
			want: ServerSettings{Known: true, Where: "launchd", FlashAttention: true}},
		{name: "remote", goos: "linux", url: "http://gpu-box:11434", want: ServerSettings{Why: "Ollama runs on gpu-box, not this machine"}},
		{name: "windows", goos: "windows", url: "http://127.0.0.1:11434", want: ServerSettings{Why: "no way to read a server's settings on windows"}},
	} {
		if got := DetectServer(ctx, tc.run, tc.goos, tc.url); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if kv := (ServerSettings{Known: true, FlashAttention: true, KVCacheType: "q8_0"}).EffectiveKVType(); kv != "q8_0" {
		t.Errorf("q8_0 with flash attention: %s", kv)
	}
	if kv := (ServerSettings{Known: true, KVCacheType: "q8_0"}).EffectiveKVType(); kv != "f16" {
		t.Errorf("q8_0 without flash attention: %s, want f16 (Ollama quantizes only with it)", kv)
	}
}

func TestReadProgress(t *testing.T) {
	for _, tc := range []struct{ name, in, wantErr string }{
		{"ok", `{"status":"pulling manifest"}` + "\n" + `{"status":"success"}` + "\n", ""},
		{"error line", `{"status":"pulling manifest"}` + "\n" + `{"error":"pull model manifest: file does not exist"}` + "\n", "ollama /api/pull: pull model manifest: file does not exist"},
		{"cut short", `{"status":"pulling manifest"}` + "\n", `the stream ended before success (last status "pulling manifest")`},
		{"not JSON", "<html>\n", "a progress line is not JSON"},
		{"too long", `{"status":"` + strings.Repeat("x", maxOllamaLine) + `"}`, "a progress line is over 65536 bytes"},
		{"bad figures", `{"status":"x","digest":"sha256:1","total":10,"completed":11}`, "progress 11 of 10"},
	} {
		var n int
		err := readProgress(strings.NewReader(tc.in), "/api/pull", func(Progress) { n++ })
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestProgressBar: on a terminal a pull draws a bar with the blob's size.
func TestProgressBar(t *testing.T) {
	var b strings.Builder
	p := newProgress(&b, true)
	p.update(Progress{Status: "pulling manifest"})
	p.update(Progress{Status: "pulling abc", Digest: "sha256:0123456789abcdef", Total: 4 << 20, Completed: 1 << 20})
	p.update(Progress{Status: "pulling abc", Digest: "sha256:0123456789abcdef", Total: 4 << 20, Completed: 4 << 20})
	p.update(Progress{Status: "success"})
	out := b.String()
	for _, want := range []string{"  pulling manifest\n", "pulling 0123456789ab", "/4.2 MB", "100%", "  success\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("bar output lacks %q:\n%q", want, out)
		}
	}
}

// recordedGateway serves the real API's recorded answers
// (testdata/gateway, written by TestSetupFlow -update), with the
// catalogue's registry address replaced by ref.
func recordedGateway(t *testing.T, ref string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, "/v1/")
		if !ok || (name != "stats" && name != "models") {
			http.NotFound(w, r)
			return
		}
		b, err := os.ReadFile("testdata/gateway/" + name + ".json")
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		if ref != "" {
			b = []byte(strings.ReplaceAll(string(b), "127.0.0.1:5000/library/tiny:latest", ref))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestSetupInteractive answers the question on standard input: a wrong
// answer is asked again, then "1" takes the first model.
func TestSetupInteractive(t *testing.T) {
	ol := ollamatest.Shared(t)
	gguf, err := testmodel.Bytes(flowModel)
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, "tiny", gguf)
	home := t.TempDir()
	// An existing file with settings of its own, which setup keeps.
	os.WriteFile(filepath.Join(home, "workerd.json"), []byte(`{"log_level": "debug", "models": {"other": "other:1b"}}`), 0o600)
	code, out, errOut := runMain([]string{"--insecure", "--no-bench", "--name", "asked/tiny", "--home", home, "--relay", "ws://127.0.0.1:9/",
		"--api-url", recordedGateway(t, reg.Ref()), "--backend-url", ol.URL()},
		Env{Detect: cpuMachine(16<<20, 64<<10), Runner: noTools{}, GOOS: "linux", Stdin: strings.NewReader("7\n1\n")})
	t.Logf("stdout:\n%s", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Which model? [1-1, Enter for 1]: \"7\" is not one of the models listed\nWhich model? [1-1, Enter for 1]: Setting up tiny-chat",
		"Context: num_ctx 4096 of 4096 trained",
		"Creating asked/tiny from " + reg.Ref(),
		"Next: add your worker token",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out, "Benchmarking") {
		t.Error("benchmarked despite --no-bench")
	}
	b, _ := os.ReadFile(filepath.Join(home, "workerd.json"))
	for _, want := range []string{`"log_level": "debug"`, `"other": "other:1b"`, `"tiny-chat": "asked/tiny"`, `"relay_url": "ws://127.0.0.1:9/"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("workerd.json lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"token"`) {
		t.Errorf("workerd.json has a token though none was given:\n%s", b)
	}
}

// errors.Is works through the usage error.
func TestUsageErrorUnwraps(t *testing.T) {
	inner := errors.New("x")
	if !errors.Is(usageError{inner}, inner) {
		t.Error("usageError hides its cause")
	}
}
