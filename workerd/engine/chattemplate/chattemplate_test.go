package chattemplate_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/engine/chattemplate"
)

var update = flag.Bool("update", false, "rewrite testdata/golden")

// templates are real-world chat template formats (written from the public
// formats into testdata/templates), with the BOS/EOS texts of their models.
var templates = []struct{ name, bos, eos string }{
	{"chatml", "", "<|im_end|>"},
	{"llama2", "<s>", "</s>"},
	{"llama3", "<|begin_of_text|>", "<|eot_id|>"},
	{"mistral", "<s>", "</s>"},
	{"qwen2", "", "<|im_end|>"},
}

type conversation struct {
	Messages []chattemplate.Message `json:"messages"`
	Tools    []json.RawMessage      `json:"tools"`
}

func readTemplate(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "templates", name+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(string(b), "\n") // the files end in a newline, GGUF strings do not
}

// TestGolden renders every conversation with every template; the goldens
// were checked by hand against each format's published layout. A template
// that refuses a conversation (llama-2 and mistral allow only alternating
// user/assistant turns) records its error.
func TestGolden(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "conversations.json"))
	if err != nil {
		t.Fatal(err)
	}
	var convs map[string]conversation
	if err := json.Unmarshal(b, &convs); err != nil {
		t.Fatal(err)
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range convs {
			if !yield(k) {
				return
			}
		}
	})
	for _, tc := range templates {
		tmpl, err := chattemplate.New(readTemplate(t, tc.name), tc.bos, tc.eos)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, cn := range names {
			c := convs[cn]
			t.Run(tc.name+"/"+cn, func(t *testing.T) {
				got, err := tmpl.Render(c.Messages, chattemplate.Options{AddGenerationPrompt: true, Tools: c.Tools})
				if err != nil {
					got = "error: " + err.Error()
				}
				path := filepath.Join("testdata", "golden", tc.name+"-"+cn+".txt")
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run with -update)", err)
				}
				if got != string(want) {
					t.Errorf("got:\n%s\nwant:\n%s", got, want)
				}
			})
		}
	}
}

// TestLayouts states a few renderings in full, independent of the goldens.
func TestLayouts(t *testing.T) {
	msgs := []chattemplate.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: " Héllo 日本 "}}
	cases := []struct {
		name     string
		tmpl     *chattemplate.Template
		opts     chattemplate.Options
		msgs     []chattemplate.Message
		want     string
		wantFail string
	}{
		{
			name: "default chatml",
			tmpl: chattemplate.Default("<s>", "</s>"),
			opts: chattemplate.Options{AddGenerationPrompt: true},
			msgs: msgs,
			want: "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Héllo 日本 <|im_end|>\n<|im_start|>assistant\n",
		},
		{
			name: "default without generation prompt",
			tmpl: chattemplate.Default("", ""),
			msgs: msgs[1:],
			want: "<|im_start|>user\n Héllo 日本 <|im_end|>\n",
		},
		{
			name: "llama3 trims content and starts with BOS",
			tmpl: mustNew(t, testmodel.Llama3Template, "<|begin_of_text|>", "<|eot_id|>"),
			opts: chattemplate.Options{AddGenerationPrompt: true},
			msgs: msgs,
			want: "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
				"<|start_header_id|>user<|end_header_id|>\n\nHéllo 日本<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
		},
		{
			name: "TrimBOS drops the template's BOS",
			tmpl: mustNew(t, testmodel.Llama3Template, "<|begin_of_text|>", "<|eot_id|>"),
			opts: chattemplate.Options{TrimBOS: true},
			msgs: msgs[1:],
			want: "<|start_header_id|>user<|end_header_id|>\n\nHéllo 日本<|eot_id|>",
		},
		{
			name:     "raise_exception becomes an error",
			tmpl:     mustNew(t, readTemplate(t, "mistral"), "<s>", "</s>"),
			msgs:     msgs,
			wantFail: "Conversation roles must alternate",
		},
		{
			name: "tool call arguments keep their key order",
			tmpl: mustNew(t, `{% for m in messages %}{% for c in m.tool_calls %}{{ c.function.name }}{{ c.function.arguments | tojson }}{% for k, v in c.function.arguments | items %}[{{ k }}={{ v }}]{% endfor %}{% endfor %}{% endfor %}`, "", ""),
			msgs: []chattemplate.Message{{Role: "assistant", ToolCalls: []chattemplate.ToolCall{{Name: "f", Arguments: `{"zeta": 1, "alpha": "x"}`}}}},
			want: `f{"zeta": 1, "alpha": "x"}[zeta=1][alpha=x]`,
		},
		{
			name: "arguments that are not an object stay text",
			tmpl: mustNew(t, `{{ messages[0].tool_calls[0].function.arguments }}`, "", ""),
			msgs: []chattemplate.Message{{Role: "assistant", ToolCalls: []chattemplate.ToolCall{{Name: "f", Arguments: `not json`}}}},
			want: `not json`,
		},
		{
			name: "tools undefined without tools, extra vars",
			tmpl: mustNew(t, `{% if tools is defined %}T{% else %}N{% endif %}{{ enable_thinking }}`, "", ""),
			opts: chattemplate.Options{Vars: map[string]any{"enable_thinking": false}},
			msgs: msgs,
			want: "NFalse",
		},
		{
			name:     "message without role",
			tmpl:     chattemplate.Default("", ""),
			msgs:     []chattemplate.Message{{Content: "x"}},
			wantFail: "message 0",
		},
		{
			name:     "bad tool JSON",
			tmpl:     chattemplate.Default("", ""),
			opts:     chattemplate.Options{Tools: []json.RawMessage{json.RawMessage(`{"a":`)}},
			msgs:     msgs,
			wantFail: "tool 0",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.tmpl.Render(tc.msgs, tc.opts)
			if tc.wantFail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantFail) {
					t.Fatalf("err = %v, want one containing %q (output %q)", err, tc.wantFail, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func mustNew(t *testing.T, src, bos, eos string) *chattemplate.Template {
	t.Helper()
	tmpl, err := chattemplate.New(src, bos, eos)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestFromMetadata(t *testing.T) {
	// The BPE test model carries a Llama-3 template; the SentencePiece one
	// none, so it gets ChatML.
	md, err := testmodel.TokenizerMetadata(testmodel.Options{BPE: &testmodel.BPE{}})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chattemplate.FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.IsDefault() || tmpl.Source() != testmodel.Llama3Template {
		t.Fatalf("got the default or another template: %q", tmpl.Source())
	}
	got, err := tmpl.Render([]chattemplate.Message{{Role: "user", Content: "hi"}}, chattemplate.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}

	md, err = testmodel.TokenizerMetadata(testmodel.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err = chattemplate.FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if !tmpl.IsDefault() {
		t.Fatal("a file without a template did not get the default")
	}
	got, _ = tmpl.Render([]chattemplate.Message{{Role: "user", Content: "hi"}}, chattemplate.Options{TrimBOS: true})
	if got != "<|im_start|>user\nhi<|im_end|>\n" {
		t.Errorf("default rendered %q", got)
	}

	// The tool_use variant is chosen for requests with tools.
	md["tokenizer.chat_template"] = "plain"
	md["tokenizer.chat_template.tool_use"] = "with {{ tools | length }} tools"
	tmpl, err = chattemplate.FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := tmpl.Render(nil, chattemplate.Options{})
	tools, _ := tmpl.Render(nil, chattemplate.Options{Tools: []json.RawMessage{json.RawMessage(`{}`)}})
	if plain != "plain" || tools != "with 1 tools" {
		t.Errorf("plain %q, tools %q", plain, tools)
	}

	for name, md := range map[string]map[string]any{
		"template not a string":     {"tokenizer.chat_template": 3},
		"template does not compile": {"tokenizer.chat_template": "{% for %}"},
		"tokens not strings":        {"tokenizer.ggml.tokens": 5},
	} {
		if _, err := chattemplate.FromMetadata(md); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
