package comfyui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzServerAnswers feeds what a ComfyUI server (or anything listening
// where one should be) may answer to the JSON reads — /object_info,
// /models/checkpoints, /history — into the backend: an error, never a
// panic, and no image reference past the bounds. Seeds are in code and in
// testdata/fuzz/FuzzServerAnswers.
func FuzzServerAnswers(f *testing.F) {
	for _, seed := range []string{
		`{"CheckpointLoaderSimple":{"input":{"required":{"ckpt_name":[["a.safetensors","b.ckpt"],{}]}}}}`,
		`{"CheckpointLoaderSimple":{"input":{"required":{"ckpt_name":["COMBO",{"options":["a.safetensors"]}]}}}}`,
		`{"p1":{"outputs":{"9":{"images":[{"filename":"x.png","subfolder":"","type":"temp"}]}},"status":{"status_str":"success","completed":true}}}`,
		`{"p1":{"status":{"status_str":"error"}}}`,
		`["not", "an", "object"]`, `{}`, `null`, ``, `{"CheckpointLoaderSimple":{"input":{"required":{"ckpt_name":["COMBO"]}}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
		}))
		defer srv.Close()
		b, err := New(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		_, _ = b.Models(ctx)
		if ref, err := b.outputImage(ctx, "p1"); err == nil {
			if ref.Filename == "" || len(ref.Filename) > 1024 || len(ref.Subfolder) > 1024 {
				t.Fatalf("accepted image reference %+v", ref)
			}
		}
	})
}
