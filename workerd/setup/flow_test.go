package setup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/devnet"
	"github.com/c0mpute/c0mpute/infra/ollamatest"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/config"
	"github.com/c0mpute/c0mpute/workerd/hardware"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden and the recorded gateway answers")

func TestMain(m *testing.M) {
	code := m.Run()
	ollamatest.StopShared()
	os.Exit(code)
}

// registry is a stand-in for an Ollama model registry (registry.ollama.ai
// cannot be reached from here), written from the protocol Ollama pulls
// with: the OCI distribution API (GET/HEAD /v2/<namespace>/<model>/manifests/<tag>
// and /v2/<namespace>/<model>/blobs/<digest>, ranged GETs for blob parts)
// with Ollama's media types, and blob downloads redirected as
// registry.ollama.ai redirects them. It serves one model, library/<name>:latest:
// a GGUF, a chat template and a config blob.
type registry struct {
	srv  *httptest.Server
	name string
	// ModelDigest is the GGUF layer's digest; Size the model's layers
	// together (what Ollama lists as its size).
	ModelDigest string
	Size        int64
	pulls       int
}

func newRegistry(t *testing.T, name string, gguf []byte) *registry {
	t.Helper()
	blobs := map[string][]byte{}
	add := func(b []byte) string {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		blobs[d] = b
		return d
	}
	type layer struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Size      int64  `json:"size"`
	}
	tmpl := []byte(ollamatest.Template)
	layers := []layer{
		{"application/vnd.ollama.image.model", add(gguf), int64(len(gguf))},
		{"application/vnd.ollama.image.template", add(tmpl), int64(len(tmpl))},
	}
	cfgBlob, _ := json.Marshal(map[string]any{"model_format": "gguf", "model_family": "llama", "model_families": []string{"llama"},
		"model_type": "0.1M", "file_type": "F32", "architecture": "amd64", "os": "linux",
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layers[0].Digest, layers[1].Digest}}})
	cfg := layer{"application/vnd.docker.container.image.v1+json", add(cfgBlob), int64(len(cfgBlob))}
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2,
		"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "config": cfg, "layers": layers})
	r := &registry{name: name, ModelDigest: layers[0].Digest, Size: layers[0].Size + layers[1].Size}
	prefix := "/v2/library/" + name + "/"
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			http.Error(w, "read-only registry", http.StatusMethodNotAllowed)
			return
		}
		rest, ok := strings.CutPrefix(req.URL.Path, prefix)
		switch {
		case ok && rest == "manifests/latest":
			r.pulls++
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(manifest))
		case ok && strings.HasPrefix(rest, "blobs/"), strings.HasPrefix(req.URL.Path, "/cdn/"):
			digest := req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:]
			b, found := blobs[digest]
			if !found {
				http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
				return
			}
			if ok && req.Method == http.MethodGet {
				// As registry.ollama.ai does, send the download to
				// another host (its CDN; here the same server by
				// another name): Ollama takes the Location of the
				// first redirect off the registry's host as the
				// direct URL of the blob's parts.
				_, port, _ := strings.Cut(req.Host, ":")
				http.Redirect(w, req, "http://localhost:"+port+"/cdn/"+digest, http.StatusTemporaryRedirect)
				return
			}
			w.Header().Set("Content-Type", "application/octet-stream")
			http.ServeContent(w, req, "", time.Time{}, bytes.NewReader(b))
		default:
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// Ref is the name Ollama pulls the model by.
func (r *registry) Ref() string {
	return strings.TrimPrefix(r.srv.URL, "http://") + "/library/" + r.name + ":latest"
}

// gateway runs the real API (infra/devnet on the embedded store) with
// models as its catalogue.
func gateway(t *testing.T, models []catalog.Model) *devnet.Stack {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	stack, err := devnet.Start(context.Background(), devnet.Config{Store: st, APIAddr: "127.0.0.1:0", RelayAddr: "127.0.0.1:0",
		Models: models, Limits: devnet.ScriptedLimits(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Close() })
	return stack
}

// noTools is a machine without GPU tools, systemctl or launchctl.
type noTools struct{}

func (noTools) Run(_ context.Context, name string, _ ...string) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", name, hardware.ErrNotFound)
}

// cpuMachine is a Linux machine with no GPU and the given memory.
func cpuMachine(totalKiB, availKiB int64) func(context.Context) (hardware.Report, error) {
	meminfo := fmt.Sprintf("MemTotal: %d kB\nMemFree: %d kB\nMemAvailable: %d kB\n", totalKiB, availKiB, availKiB)
	return func(ctx context.Context) (hardware.Report, error) {
		return hardware.Detect(ctx, noTools{}, hardware.System{GOOS: "linux", NumCPU: 2,
			ReadFile: func(string) ([]byte, error) { return []byte(meminfo), nil }})
	}
}

// run runs Main and returns its exit code and output.
func runMain(args []string, env Env) (int, string, string) {
	var stdout, stderr bytes.Buffer
	env.Stdout, env.Stderr = &stdout, &stderr
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	code := Main(args, env)
	return code, stdout.String(), stderr.String()
}

// flowModel is the tiny model the flow tests pull: trained on 4096
// tokens, with 2 layers of 4 KV heads of 16 values, so 2×4×(16+16)×2 =
// 512 bytes of f16 KV cache a token.
var flowModel = testmodel.Options{Seed: 7, Context: 4096}

const flowKVPerToken = 512

// TestSetupFlow runs the whole setup without questions against a real
// Ollama pulling from the registry stand-in and the real gateway API:
// the pull's progress is shown step by step, the tuned model exists in
// Ollama with the num_ctx the memory allows (less than the trained
// context: memory is the limit here), the benchmark's figures are
// positive, and workerd.json loads with config.Load.
func TestSetupFlow(t *testing.T) {
	ol := ollamatest.Shared(t)
	gguf, err := testmodel.Bytes(flowModel)
	if err != nil {
		t.Fatal(err)
	}
	reg := newRegistry(t, "tiny", gguf)
	stack := gateway(t, []catalog.Model{
		{ID: "tiny-chat", Price: 10, Ollama: reg.Ref(), MemoryMiB: 1},
		{ID: "huge-chat", Price: 15, Ollama: "huge:405b", MemoryMiB: 4_000_000},
		{ID: "scripted", Price: 5},
	})
	recordGateway(t, stack)

	// 2 MiB available: after 10 % headroom and the weights, room for
	// fewer than the 4096 trained tokens.
	const availKiB = 2048
	budget := int64(availKiB*1024)/100*90 - reg.Size
	wantCtx := min(budget/flowKVPerToken, 4096)
	wantCtx -= wantCtx % 256
	if wantCtx >= 4096 || wantCtx < 2048 {
		t.Fatalf("test model of %d bytes leaves num_ctx %d: the test wants memory to limit it", reg.Size, wantCtx)
	}

	home := t.TempDir()
	code, out, errOut := runMain([]string{"--yes", "--insecure", "--home", home, "--relay", stack.RelayURL,
		"--api-url", stack.APIURL, "--backend-url", ol.URL(), "--token", "cwt_flowtest", "--bench-tokens", "16"},
		Env{Detect: cpuMachine(16<<20, availKiB), Runner: noTools{}, GOOS: "linux"})
	t.Logf("stdout:\n%s", out)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	d := short(reg.ModelDigest)
	for _, want := range []string{
		"CPU only: 2 CPUs, 16.0 GiB RAM (2 MiB available)",
		"Network (" + stack.APIURL + "): 3 models, 0 workers online, 0 requests queued",
		"   1. tiny-chat ",
		"does not fit: huge-chat needs 3906.2 GiB, this machine has 16.0 GiB",
		"not offered to Ollama workers: scripted",
		"Pulling " + reg.Ref() + " into Ollama 0.6.5",
		"  pulling manifest\n",
		"  pulling " + d + ": ",
		"  pulled " + d + "\n",
		"  verifying sha256 digest\n",
		"  writing manifest\n",
		"  success\n",
		"Ollama server: cannot tell",
		fmt.Sprintf("Context: num_ctx %d of 4096 trained", wantCtx),
		"Creating c0mpute/tiny-chat from " + reg.Ref(),
		"OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve",
		"Wrote " + filepath.Join(home, "workerd.json"),
		"Next: workerd run --home " + home,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if reg.pulls == 0 {
		t.Error("Ollama never asked the registry for the manifest")
	}

	// The benchmark's figures.
	m := regexp.MustCompile(`time to first token ([0-9.]+) ms, ([0-9.]+) tokens/s \((\d+) tokens in ([0-9.]+) ms\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatal("no benchmark line")
	}
	for i, what := range []string{"", "TTFT", "tok/s", "tokens", "elapsed"} {
		if i == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(m[i], 64); err != nil || v <= 0 {
			t.Errorf("benchmark %s = %s, want > 0", what, m[i])
		}
	}

	// The tuned model, in Ollama, with that num_ctx.
	show, err := ollamaClient{base: ol.URL(), hc: http.DefaultClient}.Show(context.Background(), "c0mpute/tiny-chat")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^num_ctx\s+` + strconv.FormatInt(wantCtx, 10) + `$`).MatchString(show.Parameters) {
		t.Errorf("tuned model's parameters:\n%s\nwant num_ctx %d", show.Parameters, wantCtx)
	}

	// workerd.json, as workerd run reads it.
	if fi, err := os.Stat(filepath.Join(home, "workerd.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("workerd.json: %v %v", fi, err)
	}
	c, err := config.Load([]string{"--home", home}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.RelayURL != stack.RelayURL || c.Token != "cwt_flowtest" || c.Backend != "ollama" || c.BackendURL != ol.URL() ||
		c.Models["tiny-chat"] != "c0mpute/tiny-chat" || len(c.Models) != 1 || c.APIURL != stack.APIURL {
		t.Errorf("loaded %+v", c)
	}
}

// recordGateway keeps the real API's answers under testdata/gateway for
// the tests that need only a recording (-update rewrites them), with the
// catalogue's registry address made fixed.
func recordGateway(t *testing.T, stack *devnet.Stack) {
	if !*update {
		return
	}
	for _, p := range []string{"stats", "models"} {
		resp, err := http.Get(stack.APIURL + "/" + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		b = regexp.MustCompile(`127\.0\.0\.1:\d+/library/`).ReplaceAll(b, []byte("127.0.0.1:5000/library/"))
		var v any
		json.Unmarshal(b, &v)
		b, _ = json.MarshalIndent(v, "", "  ")
		os.MkdirAll("testdata/gateway", 0o755)
		if err := os.WriteFile("testdata/gateway/"+p+".json", append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
