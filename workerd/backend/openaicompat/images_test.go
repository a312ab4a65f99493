package openaicompat

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/backend"
)

// imageServer answers POST /v1/images/generations with answer(body) and
// records the request body.
func imageServer(t *testing.T, status int, answer func(body map[string]any) string) (*httptest.Server, chan map[string]any) {
	got := make(chan map[string]any, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/images/generations" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		select {
		case got <- body:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer(body))
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func testPNG(t *testing.T, w, h int) []byte {
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestImageForwarding(t *testing.T) {
	want := testPNG(t, 64, 32)
	srv, got := imageServer(t, 200, func(map[string]any) string {
		return `{"created":1,"data":[{"b64_json":"` + base64.StdEncoding.EncodeToString(want) + `"}]}`
	})
	b := New(srv.URL, WithImageModels("sdxl"))
	ctx := context.Background()
	if c, _ := b.Capabilities(ctx, "sdxl"); !c.Image || c.Tools {
		t.Fatalf("image model capabilities %+v", c)
	}
	if c, _ := b.Capabilities(ctx, "llama"); c.Image || !c.Tools {
		t.Fatalf("chat model capabilities %+v", c)
	}
	img, err := b.Image(ctx, "sdxl", backend.ImageRequest{Prompt: "a cat", Width: 64, Height: 32}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(img.PNG, want) {
		t.Fatal("image differs from the server's")
	}
	body := <-got
	if body["model"] != "sdxl" || body["prompt"] != "a cat" || body["n"] != 1.0 || body["size"] != "64x32" || body["response_format"] != "b64_json" {
		t.Fatalf("request body %v", body)
	}
	if _, err := b.Image(ctx, "llama", backend.ImageRequest{Prompt: "p", Width: 64, Height: 32}, nil); err == nil {
		t.Fatal("a chat model rendered an image")
	}
}

func TestImageForwardingErrors(t *testing.T) {
	const marker = "zq-marker-img-9"
	for _, tc := range []struct {
		name   string
		status int
		answer string
		want   string
	}{
		{"server error", 400, `{"error":{"message":"bad prompt ` + marker + `","type":"invalid_request_error"}}`, "400 Bad Request"},
		{"no data", 200, `{"created":1,"data":[]}`, "holds no image"},
		{"url only", 200, `{"created":1,"data":[{"url":"http://x/y.png"}]}`, "no b64_json"},
		{"not base64", 200, `{"created":1,"data":[{"b64_json":"!!"}]}`, "not base64"},
		{"not json", 200, `<html>`, "not OpenAI's JSON"},
		{"too large", 200, `{"data":[{"b64_json":"` + strings.Repeat("A", maxImageAnswer) + `"}]}`, "over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := imageServer(t, tc.status, func(map[string]any) string { return tc.answer })
			_, err := New(srv.URL, WithImageModels("m")).Image(context.Background(), "m", backend.ImageRequest{Prompt: marker, Width: 64, Height: 64}, nil)
			if err == nil || !strings.Contains(backend.SafeText(err), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
			if strings.Contains(backend.SafeText(err), marker) {
				t.Fatalf("the loggable error quotes the server: %q", backend.SafeText(err))
			}
		})
	}
}
