package speculate_test

import (
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

var update = flag.Bool("update", false, "rewrite testdata/choice_errors.golden")

func TestParseChoice(t *testing.T) {
	lookup := speculate.Spec{Mode: speculate.ModeLookup}
	none := speculate.Spec{Mode: speculate.ModeNone}
	file := func(p string) speculate.Spec { return speculate.Spec{Mode: speculate.ModeModel, Path: p} }
	for _, c := range []struct {
		in   string
		want speculate.Choice
	}{
		{"", speculate.Choice{Default: lookup}},
		{"   ", speculate.Choice{Default: lookup}},
		{"lookup", speculate.Choice{Default: lookup}},
		{"none", speculate.Choice{Default: none}},
		{"/models/draft.gguf", speculate.Choice{Default: file("/models/draft.gguf")}},
		{"draft.gguf", speculate.Choice{Default: file("draft.gguf")}},
		{"Lookup", speculate.Choice{Default: file("Lookup")}}, // keywords are lowercase; anything else is a path
		{"qwen2.5:72b=/m/qwen-0.5b.gguf", speculate.Choice{Default: lookup, PerModel: map[string]speculate.Spec{"qwen2.5:72b": file("/m/qwen-0.5b.gguf")}}},
		{" none , llama=lookup , qwen = /m/q.gguf ", speculate.Choice{Default: none, PerModel: map[string]speculate.Spec{"llama": lookup, "qwen": file("/m/q.gguf")}}},
		{"m=/a=b.gguf", speculate.Choice{Default: lookup, PerModel: map[string]speculate.Spec{"m": file("/a=b.gguf")}}},
		{"hf.co/org/model:Q4_K_M=none", speculate.Choice{Default: lookup, PerModel: map[string]speculate.Spec{"hf.co/org/model:Q4_K_M": none}}},
		{"/path with spaces/d.gguf", speculate.Choice{Default: file("/path with spaces/d.gguf")}},
		{strings.Repeat("m", 128) + "=none", speculate.Choice{Default: lookup, PerModel: map[string]speculate.Spec{strings.Repeat("m", 128): none}}},
	} {
		got, err := speculate.ParseChoice(c.in)
		if err != nil {
			t.Errorf("ParseChoice(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseChoice(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

// Every malformed value is refused with a message that says what is wrong
// and restates the form; the messages are in testdata/choice_errors.golden
// (go test ./workerd/speculate -run TestParseChoiceErrors -update
// rewrites it).
func TestParseChoiceErrors(t *testing.T) {
	cases := []struct{ name, in string }{
		{"empty entry", "lookup,,qwen=none"},
		{"trailing comma", "lookup,"},
		{"two defaults", "lookup,none"},
		{"two default paths", "/a.gguf, /b.gguf"},
		{"a model named twice", "qwen=none, qwen=lookup"},
		{"no model", "=lookup"},
		{"no spec", "qwen="},
		{"spec of spaces", "qwen=  "},
		{"model name too long", strings.Repeat("m", 129) + "=none"},
		{"model name with a space", "my model=none"},
		{"model name with a control character", "qw\ten=none"},
		{"model name not UTF-8", "qw\xffen=none"},
		{"path too long", "/" + strings.Repeat("p", 4096)},
		{"path with a control character", "/models/d\n.gguf"},
	}
	var got strings.Builder
	for _, c := range cases {
		ch, err := speculate.ParseChoice(c.in)
		if err == nil {
			t.Errorf("%s: ParseChoice(%q) = %+v, want an error", c.name, c.in, ch)
			continue
		}
		if !strings.Contains(err.Error(), "want SPEC or MODEL=SPEC") {
			t.Errorf("%s: %q does not restate the expected form", c.name, err)
		}
		fmt.Fprintf(&got, "# %s\n%s\n\n", c.name, err)
	}
	const golden = "testdata/choice_errors.golden"
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("messages differ from %s (-update rewrites it):\n%s", golden, got.String())
	}
}

// For falls back to the default, and to lookup for a zero Choice.
func TestChoiceFor(t *testing.T) {
	c, err := speculate.ParseChoice("none,qwen=/q.gguf")
	if err != nil {
		t.Fatal(err)
	}
	if s := c.For("qwen"); s.Mode != speculate.ModeModel || s.Path != "/q.gguf" {
		t.Errorf("For(qwen) = %+v", s)
	}
	if s := c.For("llama"); s.Mode != speculate.ModeNone {
		t.Errorf("For(llama) = %+v, want the default none", s)
	}
	if s := (speculate.Choice{}).For("x"); s.Mode != speculate.ModeLookup {
		t.Errorf("zero Choice: For = %+v, want lookup", s)
	}
}
