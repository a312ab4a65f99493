package api

import (
	"bytes"
	"errors"
	"image"
	"image/jpeg"
	"image/png"
	"net/http"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

func TestImageJobRequest(t *testing.T) {
	spec := &catalog.ImageSpec{Sizes: []string{"1024x1024", "512x768"}}
	tests := []struct {
		name  string
		body  string
		param string // "" for accepted
		want  relaymsg.ImageRequest
	}{
		{"minimal", `{"model":"m","prompt":"a cat"}`, "", relaymsg.ImageRequest{Prompt: "a cat", Width: 1024, Height: 1024}},
		{"size and the accepted extras", `{"model":"m","prompt":"a cat","size":"512x768","n":1,"response_format":"b64_json","user":"u","safety_identifier":"s","quality":"auto","moderation":"low","output_format":"png","background":"opaque","stream":false,"partial_images":0}`,
			"", relaymsg.ImageRequest{Prompt: "a cat", Width: 512, Height: 768}},
		{"auto size", `{"model":"m","prompt":"a cat","size":"auto"}`, "", relaymsg.ImageRequest{Prompt: "a cat", Width: 1024, Height: 1024}},
		{"no prompt", `{"model":"m"}`, "prompt", relaymsg.ImageRequest{}},
		{"blank prompt", `{"model":"m","prompt":"  "}`, "prompt", relaymsg.ImageRequest{}},
		{"long prompt", `{"model":"m","prompt":"` + strings.Repeat("a", relaymsg.MaxImagePrompt+1) + `"}`, "prompt", relaymsg.ImageRequest{}},
		{"n=2", `{"model":"m","prompt":"p","n":2}`, "n", relaymsg.ImageRequest{}},
		{"n=0", `{"model":"m","prompt":"p","n":0}`, "n", relaymsg.ImageRequest{}},
		{"url", `{"model":"m","prompt":"p","response_format":"url"}`, "response_format", relaymsg.ImageRequest{}},
		{"size not offered", `{"model":"m","prompt":"p","size":"256x256"}`, "size", relaymsg.ImageRequest{}},
		{"hd", `{"model":"m","prompt":"p","quality":"hd"}`, "quality", relaymsg.ImageRequest{}},
		{"style", `{"model":"m","prompt":"p","style":"vivid"}`, "style", relaymsg.ImageRequest{}},
		{"transparent", `{"model":"m","prompt":"p","background":"transparent"}`, "background", relaymsg.ImageRequest{}},
		{"jpeg", `{"model":"m","prompt":"p","output_format":"jpeg"}`, "output_format", relaymsg.ImageRequest{}},
		{"compression", `{"model":"m","prompt":"p","output_compression":50}`, "output_compression", relaymsg.ImageRequest{}},
		{"stream", `{"model":"m","prompt":"p","stream":true}`, "stream", relaymsg.ImageRequest{}},
		{"partial images", `{"model":"m","prompt":"p","partial_images":2}`, "partial_images", relaymsg.ImageRequest{}},
		{"unknown field", `{"model":"m","prompt":"p","nope":1}`, "nope", relaymsg.ImageRequest{}},
		{"n as a string", `{"model":"m","prompt":"p","n":"1"}`, "n", relaymsg.ImageRequest{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := decodeImageRequest(strings.NewReader(tc.body))
			var got relaymsg.ImageRequest
			if err == nil {
				got, err = imageJobRequest(req, spec)
			}
			if tc.param == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var e *oaiwire.Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Param == nil || *e.Param != tc.param {
				t.Fatalf("err = %#v, want a 400 naming %s", err, tc.param)
			}
		})
	}
}

func TestDecodeImageRequestBounds(t *testing.T) {
	for name, body := range map[string]string{
		"empty":     "",
		"not utf-8": "{\"prompt\":\"\xff\"}",
		"trailing":  `{"prompt":"p"} {}`,
		"not json":  `{`,
		"too large": `{"prompt":"` + strings.Repeat("a", maxImageBody) + `"}`,
	} {
		if _, err := decodeImageRequest(strings.NewReader(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckImage(t *testing.T) {
	encode := func(w, h int, enc func(*bytes.Buffer, image.Image) error) []byte {
		var buf bytes.Buffer
		if err := enc(&buf, image.NewRGBA(image.Rect(0, 0, w, h))); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	pngOf := func(b *bytes.Buffer, m image.Image) error { return png.Encode(b, m) }
	jpegOf := func(b *bytes.Buffer, m image.Image) error { return jpeg.Encode(b, m, nil) }
	good := encode(64, 32, pngOf)
	for _, tc := range []struct {
		name string
		img  []byte
		want string
	}{
		{"good", good, ""},
		{"wrong size", encode(32, 64, pngOf), "image_wrong_size"},
		{"jpeg", encode(64, 32, jpegOf), "image_not_png"},
		{"garbage", []byte("not an image"), "image_undecodable"},
		{"truncated", good[:len(good)-20], "image_undecodable"},
	} {
		if got := checkImage(tc.img, 64, 32); got != tc.want {
			t.Errorf("%s: checkImage = %q, want %q", tc.name, got, tc.want)
		}
	}
}
