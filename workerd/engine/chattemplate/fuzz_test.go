package chattemplate_test

import (
	"encoding/json"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/chattemplate"
)

// FuzzRender: templates come from model files and messages and tool JSON
// from the network; any of them may be malformed. Errors are fine, panics
// are not, and the default template must render any message text.
func FuzzRender(f *testing.F) {
	f.Add(chattemplate.DefaultSource, "user", "hi", `{"type":"function","function":{"name":"f"}}`, `{"a":1}`)
	f.Add(`{{ messages[0].content | trim }}{{ tools | tojson }}`, "user", " é ", `[1,2,{"x":null}]`, `nope`)
	f.Add(`{% for m in messages %}{{ m.tool_calls[0].function.arguments.a }}{% endfor %}`, "assistant", "", `{}`, `{"a":[true,1.5e3]}`)
	f.Fuzz(func(t *testing.T, src, role, content, tool, args string) {
		msgs := []chattemplate.Message{{Role: role, Content: content, ToolCalls: []chattemplate.ToolCall{{Name: "f", Arguments: args}}}}
		opts := chattemplate.Options{AddGenerationPrompt: true, Tools: []json.RawMessage{json.RawMessage(tool)}}
		if tmpl, err := chattemplate.New(src, "<s>", "</s>"); err == nil {
			_, _ = tmpl.Render(msgs, opts)
		}
		if role == "" {
			return
		}
		if _, err := chattemplate.Default("", "").Render(msgs, chattemplate.Options{}); err != nil {
			t.Fatalf("default template failed on %q: %v", content, err)
		}
	})
}
