// Package chattemplate renders a chat into the prompt text a model was
// trained on, with the Jinja template its GGUF file carries
// (tokenizer.chat_template), the way Hugging Face's apply_chat_template
// and llama.cpp do. Templates run on github.com/ardanlabs/jinja, a Go
// Jinja engine built for these templates (no cgo, no dependencies).
//
// The template sees: messages (role, content, and where set name,
// tool_calls with function.name and function.arguments, tool_call_id),
// add_generation_prompt, bos_token, eos_token, tools (when given),
// raise_exception, and any extra variables the caller passes.
//
// # Fallback
//
// A file without tokenizer.chat_template gets Default, ChatML:
//
//	<|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
//
// which is also what llama.cpp falls back to. On a model not trained on
// it the prompt is still well formed, but replies may be worse.
//
// # BOS
//
// Many templates begin with bos_token while the tokenizer also adds BOS;
// Options.TrimBOS removes the template's copy (as llama.cpp's server does)
// so the prompt starts with one.
//
// Tool definitions and tool-call arguments are JSON; their object keys
// keep the order they came in, as in Python.
//
// # Trust
//
// A template is a program from the model file: it runs with no time or
// size limit (a loop over range(10**9) would spin for minutes), as in
// llama.cpp and Hugging Face. Serve model files you trust. Engine panics
// are turned into errors.
package chattemplate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ardanlabs/jinja"
	"github.com/go-playground/validator/v10"
)

// DefaultSource is the ChatML template used when a file has none.
const DefaultSource = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- endif -%}`

// Message is one chat message.
type Message struct {
	Role       string     `validate:"required"`
	Content    string     // text; "" for an assistant turn that only calls tools
	Name       string     // optional
	ToolCalls  []ToolCall `validate:"dive"`
	ToolCallID string     // for role "tool": the call answered
}

// ToolCall is a function call an assistant message made.
type ToolCall struct {
	ID        string
	Name      string `validate:"required"`
	Arguments string // JSON text, as the OpenAI API carries it
}

// Options shape one rendering.
type Options struct {
	// AddGenerationPrompt ends the prompt with the opening of an
	// assistant turn, for the model to continue.
	AddGenerationPrompt bool
	// Tools are the tool definitions (OpenAI's {"type":"function",
	// "function":{...}} objects), each raw JSON. Nil leaves tools
	// undefined in the template.
	Tools []json.RawMessage
	// TrimBOS drops a bos_token the rendered text starts with: set it
	// when the tokenizer adds BOS itself.
	TrimBOS bool
	// Vars are extra template variables (e.g. enable_thinking).
	Vars map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	source   string
	tmpl     *jinja.Template
	toolUse  *Template // the file's tool_use variant, if any
	bos, eos string
	isDef    bool
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// New compiles a Jinja chat template. bos and eos are the texts of the
// model's BOS and EOS tokens, for bos_token and eos_token.
func New(source, bos, eos string) (*Template, error) {
	t, err := compile(source)
	if err != nil {
		return nil, err
	}
	return &Template{source: source, tmpl: t, bos: bos, eos: eos}, nil
}

// compile turns a panic in the engine (templates come from model files)
// into an error.
func compile(source string) (t *jinja.Template, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chattemplate: compile: %v", r)
		}
	}()
	t, err = jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: compile: %w", err)
	}
	return t, nil
}

// Default returns the ChatML fallback template.
func Default(bos, eos string) *Template {
	t, err := New(DefaultSource, bos, eos)
	if err != nil {
		panic("chattemplate: default template does not compile: " + err.Error()) // a constant: fails every test
	}
	t.isDef = true
	return t
}

// Source is the template's Jinja text.
func (t *Template) Source() string { return t.source }

// IsDefault reports whether this is the fallback, not the file's own.
func (t *Template) IsDefault() bool { return t.isDef }

// Render renders msgs into a prompt.
func (t *Template) Render(msgs []Message, o Options) (string, error) {
	for i := range msgs {
		if err := validate.Struct(msgs[i]); err != nil {
			return "", fmt.Errorf("chattemplate: message %d: %w", i, err)
		}
	}
	if len(o.Tools) > 0 && t.toolUse != nil {
		t = t.toolUse
	}
	data := map[string]jinja.Value{
		"messages":              messagesValue(msgs),
		"add_generation_prompt": jinja.NewBool(o.AddGenerationPrompt),
		"bos_token":             jinja.NewString(t.bos),
		"eos_token":             jinja.NewString(t.eos),
	}
	if o.Tools != nil {
		tools := make([]jinja.Value, len(o.Tools))
		for i, raw := range o.Tools {
			v, err := jsonValue(raw)
			if err != nil {
				return "", fmt.Errorf("chattemplate: tool %d: %w", i, err)
			}
			tools[i] = v
		}
		data["tools"] = jinja.NewList(tools)
	}
	for k, v := range o.Vars {
		data[k] = jinja.FromGoValue(v)
	}
	out, err := t.render(data)
	if err != nil {
		return "", err
	}
	if o.TrimBOS && t.bos != "" {
		out = strings.TrimPrefix(out, t.bos)
	}
	return out, nil
}

func (t *Template) render(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chattemplate: render: %v", r)
		}
	}()
	out, err = t.tmpl.RenderValues(data)
	if err != nil {
		return "", fmt.Errorf("chattemplate: render: %w", err)
	}
	return out, nil
}

func messagesValue(msgs []Message) jinja.Value {
	list := make([]jinja.Value, len(msgs))
	for i, m := range msgs {
		d := jinja.NewDict()
		dict := d.AsDict()
		dict.Set("role", jinja.NewString(m.Role))
		dict.Set("content", jinja.NewString(m.Content))
		if m.Name != "" {
			dict.Set("name", jinja.NewString(m.Name))
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]jinja.Value, len(m.ToolCalls))
			for j, c := range m.ToolCalls {
				fn := jinja.NewDict()
				fn.AsDict().Set("name", jinja.NewString(c.Name))
				// Templates index into the arguments (arguments | items,
				// arguments.city) or print them with tojson: an object
				// when the text is one, else the text.
				args := jinja.NewString(c.Arguments)
				if v, err := jsonValue(json.RawMessage(c.Arguments)); err == nil && v.IsDict() {
					args = v
				}
				fn.AsDict().Set("arguments", args)
				call := jinja.NewDict()
				if c.ID != "" {
					call.AsDict().Set("id", jinja.NewString(c.ID))
				}
				call.AsDict().Set("type", jinja.NewString("function"))
				call.AsDict().Set("function", fn)
				calls[j] = call
			}
			dict.Set("tool_calls", jinja.NewList(calls))
		}
		if m.ToolCallID != "" {
			dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
		}
		list[i] = d
	}
	return jinja.NewList(list)
}

// jsonValue decodes JSON into template values, keeping object key order.
func jsonValue(raw json.RawMessage) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Value{}, errors.New("trailing data after JSON value")
	}
	return v, nil
}

const maxDepth = 64

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxDepth {
		return jinja.Value{}, errors.New("JSON nested too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, fmt.Errorf("invalid JSON: %w", err)
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, fmt.Errorf("invalid JSON: %w", err)
				}
				key, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, fmt.Errorf("invalid JSON: %w", err)
			}
			return d, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, fmt.Errorf("invalid JSON: %w", err)
			}
			return jinja.NewList(items), nil
		}
		return jinja.Value{}, fmt.Errorf("invalid JSON delimiter %v", x)
	default:
		return jinja.FromGoValue(x), nil
	}
}
