package catalog

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestDefaultResolvesAliases(t *testing.T) {
	c, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"c0mpute-pro": "c0mpute-pro", "devstral-24b": "code",
		"c0mpute-code": "code", "c0mpute-max-supergemma": "c0mpute-max"} {
		m, ok := c.Resolve(name)
		if !ok || m.ID != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", name, m.ID, ok, want)
		}
	}
	if _, ok := c.Resolve("gpt-4"); ok {
		t.Error("unknown model resolved")
	}
	if m, _ := c.Resolve("c0mpute-max-think"); m.Price != 20 {
		t.Errorf("price %d", m.Price)
	}
}

func TestRejects(t *testing.T) {
	for name, in := range map[string]string{
		"duplicate id":  `[{"id":"a","price":1},{"id":"a","price":2}]`,
		"alias clash":   `[{"id":"a","price":1},{"id":"b","price":1,"aliases":["a"]}]`,
		"zero price":    `[{"id":"a","price":0}]`,
		"no id":         `[{"price":3}]`,
		"unknown field": `[{"id":"a","price":1,"cost":2}]`,
		"float price":   `[{"id":"a","price":1.5}]`,
		"not an array":  `{"id":"a"}`,
		"empty alias":   `[{"id":"a","price":1,"aliases":[""]}]`,
	} {
		if _, err := Load(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := Load(strings.NewReader(`[{"id":"a","price":7,"aliases":["b"]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := c.Resolve("b"); !ok || m.Price != 7 {
		t.Errorf("alias: %+v %v", m, ok)
	}
}

// A deployment's catalog comes inline, from a file, or is the default;
// a bad one is an error at start, never a silent default.
func TestFromSource(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(path, []byte(`[{"id":"file-model","price":3}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, source, want string
		wantErr            bool
	}{
		{"default", "", "c0mpute-pro", false},
		{"inline", `  [{"id":"inline-model","price":7,"aliases":["im"],"known_answers":true}]`, "inline-model", false},
		{"file", path, "file-model", false},
		{"missing file", filepath.Join(t.TempDir(), "nope.json"), "", true},
		{"unknown field", `[{"id":"m","price":1,"prise":2}]`, "", true},
		{"no models", `[]`, "", true},
		{"invalid price", `[{"id":"m","price":0}]`, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := FromSource(tc.source)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("FromSource(%q) accepted it", tc.source)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := c.Resolve(tc.want); !ok {
				t.Errorf("FromSource(%q) has no %s: %v", tc.source, tc.want, c.Models())
			}
		})
	}
}

func TestIDs(t *testing.T) {
	c, err := New([]Model{{ID: "b", Price: 1}, {ID: "a", Price: 2, Aliases: []string{"x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.IDs(); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("IDs() = %v", got)
	}
}

func TestImageModels(t *testing.T) {
	c, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := c.Resolve("c0mpute-image"); !ok || m.Image == nil || m.Price != 20 || m.Image.DefaultSize() != "1024x1024" {
		t.Fatalf("default image model: %+v, %v", m, ok)
	}
	for size, ok := range map[string]bool{"1024x1024": true, "64x2048": true, "64x4096": false, "512x768": true,
		"1024": false, "1024x": false, "x1024": false, "1024X1024": false, "+512x512": false, "0512x512": false,
		"1000x1001": false, "56x64": false, "8192x8192": false, " 512x512": false, "512x512x512": false} {
		if _, _, err := ParseSize(size); (err == nil) != ok {
			t.Errorf("ParseSize(%q) error %v, want ok=%v", size, err, ok)
		}
	}
	for name, in := range map[string]string{
		"no sizes":  `[{"id":"i","price":20,"image":{"sizes":[]}}]`,
		"bad size":  `[{"id":"i","price":20,"image":{"sizes":["1000x1001"]}}]`,
		"not WxH":   `[{"id":"i","price":20,"image":{"sizes":["big"]}}]`,
		"no object": `[{"id":"i","price":20,"image":{}}]`,
	} {
		if _, err := Load(strings.NewReader(in)); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	if _, err := Load(strings.NewReader(`[{"id":"i","price":20,"image":{"sizes":["512x512","1024x1024"]}}]`)); err != nil {
		t.Fatal(err)
	}
}

// A ring model names where its shards are published and the rings the
// gateway may form of it; every bound is checked at load, and a ring model
// cannot be an image model.
func TestRingModels(t *testing.T) {
	c, err := Load(strings.NewReader(`[{"id":"big","price":30,"ring":{"blob_url":"https://blobs.example/big","min_stages":2,"max_stages":8,"standbys":1,"context_tokens":8192}}]`))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := c.Resolve("big")
	if !ok || m.Ring == nil || *m.Ring != (RingSpec{BlobURL: "https://blobs.example/big", MinStages: 2, MaxStages: 8, Standbys: 1, ContextTokens: 8192}) {
		t.Fatalf("ring model: %+v", m)
	}
	for _, tc := range []struct{ name, ring string }{
		{"no blob url", `{"min_stages":1,"max_stages":2,"context_tokens":8}`},
		{"blob url not http", `{"blob_url":"file:///srv/big","min_stages":1,"max_stages":2,"context_tokens":8}`},
		{"blob url not a url", `{"blob_url":"big","min_stages":1,"max_stages":2,"context_tokens":8}`},
		{"no min stages", `{"blob_url":"https://b.example/x","max_stages":2,"context_tokens":8}`},
		{"max below min", `{"blob_url":"https://b.example/x","min_stages":3,"max_stages":2,"context_tokens":8}`},
		{"more stages than a completion pays", `{"blob_url":"https://b.example/x","min_stages":1,"max_stages":33,"context_tokens":8}`},
		{"negative standbys", `{"blob_url":"https://b.example/x","min_stages":1,"max_stages":2,"standbys":-1,"context_tokens":8}`},
		{"too many standbys", `{"blob_url":"https://b.example/x","min_stages":1,"max_stages":2,"standbys":9,"context_tokens":8}`},
		{"no context", `{"blob_url":"https://b.example/x","min_stages":1,"max_stages":2}`},
		{"unknown field", `{"blob_url":"https://b.example/x","min_stages":1,"max_stages":2,"context_tokens":8,"verifiers":1}`},
	} {
		if _, err := Load(strings.NewReader(`[{"id":"big","price":30,"ring":` + tc.ring + `}]`)); err == nil {
			t.Errorf("%s: loaded", tc.name)
		}
	}
	_, err = Load(strings.NewReader(`[{"id":"big","price":30,"image":{"sizes":["512x512"]},"ring":{"blob_url":"https://b.example/x","min_stages":1,"max_stages":2,"context_tokens":8}}]`))
	if err == nil || !strings.Contains(err.Error(), "a ring model is a chat model") {
		t.Errorf("image ring model: %v", err)
	}
}
