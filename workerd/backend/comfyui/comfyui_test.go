package comfyui_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/workerd/backend"
	"github.com/c0mpute/c0mpute/workerd/backend/comfyui"
	"github.com/c0mpute/c0mpute/workerd/backend/comfyui/comfyuitest"
)

const marker = "zq-image-marker-41c7"

func newBackend(t *testing.T, srv *comfyuitest.Server, opts ...comfyui.Option) *comfyui.Backend {
	t.Helper()
	b, err := comfyui.New(srv.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRendersThroughTheAPI(t *testing.T) {
	srv := comfyuitest.Start(t, comfyuitest.Options{})
	b := newBackend(t, srv)
	ctx := context.Background()

	models, err := b.Models(ctx)
	if err != nil || len(models) != 1 || models[0] != comfyuitest.DefaultCheckpoint {
		t.Fatalf("Models = %v, %v", models, err)
	}
	caps, err := b.Capabilities(ctx, models[0])
	if err != nil || !caps.Image {
		t.Fatalf("Capabilities = %+v, %v", caps, err)
	}
	stats, err := b.SystemStats(ctx)
	if err != nil || len(stats.Devices) != 1 || stats.Devices[0].VRAMTotal == 0 {
		t.Fatalf("SystemStats = %+v, %v", stats, err)
	}

	var mu sync.Mutex
	var steps []int
	img, err := b.Image(ctx, models[0], backend.ImageRequest{Prompt: "a red fox " + marker, Width: 512, Height: 768},
		func(step, total int) {
			mu.Lock()
			defer mu.Unlock()
			if total != 25 {
				t.Errorf("progress total %d, want the workflow's 25 steps", total)
			}
			steps = append(steps, step)
		})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(img.PNG))
	if err != nil || cfg.Width != 512 || cfg.Height != 768 {
		t.Fatalf("image %dx%d, %v; want a 512x768 PNG", cfg.Width, cfg.Height, err)
	}
	mu.Lock()
	if len(steps) != 25 || steps[0] != 1 || steps[24] != 25 {
		t.Errorf("progress steps %v, want 1..25", steps)
	}
	mu.Unlock()
	if c := srv.Counts(); c.Queued != 1 || c.Views != 1 {
		t.Errorf("stand-in saw %+v, want one prompt and one /view", c)
	}
	// ComfyUI's history, which holds the prompt, is rid of the job.
	if n := srv.History(); n != 0 {
		t.Errorf("the stand-in's history holds %d prompts after the job, want none", n)
	}
	// The graph carried the job's values where the placeholders were.
	g := srv.Prompts()[0]
	text := g["6"].(map[string]any)["inputs"].(map[string]any)["text"]
	latent := g["5"].(map[string]any)["inputs"].(map[string]any)
	if text != "a red fox "+marker || latent["width"] != 512.0 || latent["height"] != 768.0 {
		t.Errorf("graph got prompt %v and latent %v", text, latent)
	}
}

func TestCancelInterrupts(t *testing.T) {
	srv := comfyuitest.Start(t, comfyuitest.Options{Hold: true})
	b := newBackend(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := b.Image(ctx, comfyuitest.DefaultCheckpoint, backend.ImageRequest{Prompt: "p", Width: 512, Height: 512},
			func(int, int) { once.Do(func() { close(started) }) })
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Image after cancel = %v, want context.Canceled", err)
	}
	c := srv.Counts()
	if c.Interrupts != 1 || len(c.Deleted) != 1 {
		t.Fatalf("stand-in saw %+v, want one interrupt and one queue delete", c)
	}
}

func TestServerFailuresAreClearErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts comfyuitest.Options
		req  backend.ImageRequest
		want string
		// redacted must not hold the prompt's marker.
	}{
		{"execution error", comfyuitest.Options{FailWith: "CUDA out of memory while sampling " + marker}, backend.ImageRequest{Prompt: marker, Width: 512, Height: 512}, "node KSampler failed (RuntimeError)"},
		{"malformed history", comfyuitest.Options{BadHistory: true}, backend.ImageRequest{Prompt: marker, Width: 512, Height: 512}, "not the JSON expected"},
		{"oversized image", comfyuitest.Options{ViewBytes: 16<<20 + 1}, backend.ImageRequest{Prompt: marker, Width: 512, Height: 512}, "image is larger than the limit"},
		{"workflow refused", comfyuitest.Options{}, backend.ImageRequest{Prompt: marker, Width: 500, Height: 512}, "HTTP 400 (prompt_outputs_failed_validation)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := comfyuitest.Start(t, tc.opts)
			b := newBackend(t, srv)
			_, err := b.Image(context.Background(), comfyuitest.DefaultCheckpoint, tc.req, nil)
			if err == nil {
				t.Fatal("no error")
			}
			safe := backend.SafeText(err)
			if !strings.Contains(safe, tc.want) {
				t.Fatalf("error %q does not say %q", safe, tc.want)
			}
			if strings.Contains(safe, marker) {
				t.Fatalf("the error workerd logs quotes the prompt: %q", safe)
			}
		})
	}
	t.Run("unknown checkpoint", func(t *testing.T) {
		srv := comfyuitest.Start(t, comfyuitest.Options{})
		_, err := newBackend(t, srv).Image(context.Background(), "nope.safetensors", backend.ImageRequest{Prompt: "p", Width: 512, Height: 512}, nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP 400 (prompt_outputs_failed_validation)") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("server down", func(t *testing.T) {
		srv := comfyuitest.Start(t, comfyuitest.Options{})
		b := newBackend(t, srv)
		srv.Close()
		if _, err := b.Models(context.Background()); err == nil {
			t.Fatal("Models of a stopped server: no error")
		}
	})
}

func TestCustomWorkflow(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The default graph with a fixed seed and the negative prompt unused.
	good := `{
	 "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "{{checkpoint}}"}},
	 "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "{{prompt}}", "clip": ["1", 1]}},
	 "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "blurry", "clip": ["1", 1]}},
	 "4": {"class_type": "EmptyLatentImage", "inputs": {"width": "{{width}}", "height": "{{height}}", "batch_size": 1}},
	 "5": {"class_type": "KSampler", "inputs": {"seed": 7, "steps": 4, "cfg": 1.5, "sampler_name": "euler", "scheduler": "simple", "denoise": 1,
	       "model": ["1", 0], "positive": ["2", 0], "negative": ["3", 0], "latent_image": ["4", 0]}},
	 "6": {"class_type": "VAEDecode", "inputs": {"samples": ["5", 0], "vae": ["1", 2]}},
	 "7": {"class_type": "SaveImage", "inputs": {"filename_prefix": "x", "images": ["6", 0]}}
	}`
	w, err := comfyui.LoadWorkflow(write("good.json", good))
	if err != nil {
		t.Fatal(err)
	}
	srv := comfyuitest.Start(t, comfyuitest.Options{})
	img, err := newBackend(t, srv, comfyui.WithWorkflow(w)).Image(context.Background(), comfyuitest.DefaultCheckpoint,
		backend.ImageRequest{Prompt: "p", Width: 256, Height: 128}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(img.PNG)); err != nil || cfg.Width != 256 || cfg.Height != 128 {
		t.Fatalf("image %+v, %v", cfg, err)
	}

	for name, tc := range map[string]struct{ body, want string }{
		"not json":      {`{`, "not an API-format workflow"},
		"ui format":     {`{"nodes": {"inputs": {}}}`, "no class_type"},
		"no prompt":     {strings.Replace(good, `"{{prompt}}"`, `"fixed"`, 1), "lacks the placeholders {{prompt}}"},
		"no size":       {strings.Replace(strings.Replace(good, `"{{width}}"`, `512`, 1), `"{{height}}"`, `512`, 1), "{{width}}, {{height}}"},
		"unknown":       {strings.Replace(good, `"blurry"`, `"{{style}}"`, 1), "unknown placeholder {{style}}"},
		"dangling link": {strings.Replace(good, `["6", 0]`, `["60", 0]`, 1), `links to node "60"`},
		"no output":     {strings.Replace(good, `"SaveImage"`, `"VAEEncode"`, 1), "no node outputs the image"},
		"two outputs":   {strings.Replace(good, `"7":`, `"8": {"class_type": "PreviewImage", "inputs": {"images": ["6", 0]}}, "7":`, 1), "both output images"},
		"empty":         {`{}`, "1 to 1000 nodes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := comfyui.LoadWorkflow(write(name+".json", tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadWorkflow = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if _, err := comfyui.LoadWorkflow(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("a missing workflow file loaded")
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:8188", "ftp://x", "http://"} {
		if _, err := comfyui.New(u); err == nil {
			t.Errorf("New(%q): no error", u)
		}
	}
}

// TestDefaultWorkflowRunsOnTheStandIn: the embedded graph passes the
// stand-in's ComfyUI-style validation as it is.
func TestDefaultWorkflowRunsOnTheStandIn(t *testing.T) {
	srv := comfyuitest.Start(t, comfyuitest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := newBackend(t, srv).Image(ctx, comfyuitest.DefaultCheckpoint, backend.ImageRequest{Prompt: "p", Width: 1024, Height: 1024}, nil); err != nil {
		t.Fatal(err)
	}
}
