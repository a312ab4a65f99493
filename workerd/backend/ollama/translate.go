package ollama

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// chatRequest is Ollama's POST /api/chat body.
type chatRequest struct {
	Model    string          `json:"model"`
	Messages []message       `json:"messages"`
	Stream   bool            `json:"stream"`
	Format   json.RawMessage `json:"format,omitempty"`
	Tools    []oaiwire.Tool  `json:"tools,omitempty"`
	Options  map[string]any  `json:"options,omitempty"`
}

// message is an Ollama chat message. Thinking and ToolName are read by
// newer Ollamas and ignored by older ones.
type message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	Thinking  string     `json:"thinking,omitempty"`
	Images    []string   `json:"images,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
	ToolName  string     `json:"tool_name,omitempty"`
}

type toolCall struct {
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// translate turns an OpenAI chat request into Ollama's. Sampling settings
// the client left out are not sent, so the model's own defaults apply.
func translate(model string, req *oaiwire.ChatRequest) (*chatRequest, error) {
	out := &chatRequest{Model: model, Stream: true, Messages: make([]message, 0, len(req.Messages))}
	toolNames := map[string]string{} // tool_call_id → function name
	for i, m := range req.Messages {
		nm := message{Role: m.Role, Content: m.Content.String()}
		switch m.Role {
		case "system", "developer":
			nm.Role = "system"
		case "user":
			for _, u := range m.Content.Images() {
				img, err := imageData(u)
				if err != nil {
					return nil, fmt.Errorf("messages[%d]: %w", i, err)
				}
				nm.Images = append(nm.Images, img)
			}
		case "assistant":
			nm.Thinking = m.Reasoning
			for j, tc := range m.ToolCalls {
				var c toolCall
				c.Function.Name = tc.Function.Name
				args := bytes.TrimSpace([]byte(tc.Function.Arguments))
				if len(args) == 0 {
					args = []byte("{}")
				}
				var obj map[string]json.RawMessage
				if err := json.Unmarshal(args, &obj); err != nil || obj == nil {
					return nil, fmt.Errorf("messages[%d].tool_calls[%d].function.arguments must be a JSON object", i, j)
				}
				c.Function.Arguments = args
				nm.ToolCalls = append(nm.ToolCalls, c)
				if tc.ID != "" {
					toolNames[tc.ID] = tc.Function.Name
				}
			}
		case "tool":
			nm.ToolName = toolNames[m.ToolCallID]
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		out.Messages = append(out.Messages, nm)
	}

	if tc := req.ToolChoice; tc == nil || tc.Mode != "none" {
		// Ollama has no tool_choice: a named function is offered alone;
		// "required" cannot be enforced.
		for _, t := range req.Tools {
			if tc == nil || tc.Function == "" || tc.Function == t.Function.Name {
				out.Tools = append(out.Tools, t)
			}
		}
	}

	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "json_object":
			out.Format = json.RawMessage(`"json"`)
		case "json_schema":
			var js struct {
				Schema json.RawMessage `json:"schema"`
			}
			if len(rf.JSONSchema) > 0 {
				if err := json.Unmarshal(rf.JSONSchema, &js); err != nil {
					return nil, fmt.Errorf("response_format.json_schema: %w", err)
				}
			}
			out.Format = json.RawMessage(`"json"`)
			if s := bytes.TrimSpace(js.Schema); len(s) > 0 && s[0] == '{' {
				out.Format = s
			}
		}
	}

	opts := map[string]any{}
	if req.Temperature != nil {
		opts["temperature"] = *req.Temperature
	}
	if req.TopP != nil {
		opts["top_p"] = *req.TopP
	}
	if req.Seed != nil {
		opts["seed"] = *req.Seed
	}
	if req.PresencePenalty != nil {
		opts["presence_penalty"] = *req.PresencePenalty
	}
	if req.FrequencyPenalty != nil {
		opts["frequency_penalty"] = *req.FrequencyPenalty
	}
	if len(req.Stop) > 0 {
		opts["stop"] = []string(req.Stop)
	}
	if n := req.Limit(); n > 0 {
		opts["num_predict"] = n
	}
	if len(opts) > 0 {
		out.Options = opts
	}
	return out, nil
}

// imageData returns the base64 payload of a data: URL, as Ollama's images
// field takes it.
func imageData(url string) (string, error) {
	head, data, ok := strings.Cut(url, ",")
	if !ok || !strings.HasPrefix(head, "data:") || !strings.HasSuffix(head, ";base64") {
		return "", fmt.Errorf("image must be a base64 data: URL")
	}
	return data, nil
}
