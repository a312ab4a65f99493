// Package oaiwire is the OpenAI chat-completions wire format as c0mpute
// speaks it: request and response shapes, their validation, and the
// server-sent-event framing. The gateway decodes with it, the relay carries
// its requests to workers, and workerd's backends translate from it.
package oaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
)

// ChatRequest is a POST /v1/chat/completions body. Fields the gateway does
// not know are ignored, as the common OpenAI-compatible servers do, so that
// SDKs sending newer optional fields keep working.
type ChatRequest struct {
	Model               string          `json:"model" validate:"required,max=128"`
	Messages            []Message       `json:"messages" validate:"required,min=1,max=2048,dive"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int64          `json:"max_tokens,omitempty" validate:"omitempty,min=1,max=1000000"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens,omitempty" validate:"omitempty,min=1,max=1000000"`
	Temperature         *float64        `json:"temperature,omitempty" validate:"omitempty,min=0,max=2"`
	TopP                *float64        `json:"top_p,omitempty" validate:"omitempty,min=0,max=1"`
	Seed                *int64          `json:"seed,omitempty"`
	Stop                Stop            `json:"stop,omitempty" validate:"max=4,dive,min=1,max=256"`
	N                   *int64          `json:"n,omitempty" validate:"omitempty,eq=1"`
	PresencePenalty     *float64        `json:"presence_penalty,omitempty" validate:"omitempty,min=-2,max=2"`
	FrequencyPenalty    *float64        `json:"frequency_penalty,omitempty" validate:"omitempty,min=-2,max=2"`
	Tools               []Tool          `json:"tools,omitempty" validate:"max=128,dive"`
	ToolChoice          *ToolChoice     `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      *ResponseFormat `json:"response_format,omitempty"`
	User                string          `json:"user,omitempty" validate:"max=256"`
	// Prediction is Predicted Outputs: text the reply is expected to
	// largely repeat. Ring models draft from it; other backends ignore it.
	Prediction *Prediction `json:"prediction,omitempty"`
}

// Prediction is the prediction object of Predicted Outputs: type
// "content" and the predicted text, a string or an array of text parts.
type Prediction struct {
	Type    string  `json:"type" validate:"required,eq=content"`
	Content Content `json:"content"`
}

// Bounds on a prediction (Validate): a ring's driver tokenizes the whole
// text to draft from it, so it is bounded like any input a worker takes
// from a stranger, and generously past what one reply repeats.
const (
	// MaxPredictionParts is the most text parts a prediction may have.
	MaxPredictionParts = 32
	// MaxPredictionBytes bounds a prediction's text, all parts together.
	MaxPredictionBytes = 64 << 10
)

// UnmarshalJSON decodes a prediction; absent content is null content, so
// that validation tells a missing content from an empty string.
func (p *Prediction) UnmarshalJSON(b []byte) error {
	type plain Prediction // the same fields without this method
	q := plain{Content: Content{Null: true}}
	if err := json.Unmarshal(b, &q); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			te.Type = reflect.TypeOf(Prediction{}) // not plain
		}
		return err
	}
	*p = Prediction(q)
	return nil
}

// Limit returns the completion token cap the client asked for, or 0 for
// none; max_completion_tokens wins over the older max_tokens.
func (r *ChatRequest) Limit() int64 {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens
	}
	if r.MaxTokens != nil {
		return *r.MaxTokens
	}
	return 0
}

// IncludeUsage reports whether a stream ends with a usage chunk.
func (r *ChatRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// StreamOptions are the stream_options object.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role       string     `json:"role" validate:"required,oneof=system developer user assistant tool"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty" validate:"max=64"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty" validate:"max=128,dive"`
	ToolCallID string     `json:"tool_call_id,omitempty" validate:"max=256"`
	// Reasoning carries a thinking model's reasoning text back in a
	// multi-turn conversation, as Ollama and llama.cpp accept it.
	Reasoning string `json:"reasoning_content,omitempty"`
}

// UnmarshalJSON decodes a message; absent content is null content, so that
// validation tells a missing content from an empty string.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message // the same fields without this method
	p := plain{Content: Content{Null: true}}
	if err := json.Unmarshal(b, &p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			te.Type = reflect.TypeOf(Message{}) // not plain
		}
		return err
	}
	*m = Message(p)
	return nil
}

// Content is a message's content: a plain string, or an array of parts.
// Null is allowed (an assistant message that only calls tools).
type Content struct {
	Text  string
	Parts []Part
	// IsParts records that the client sent an array, so it is sent on the
	// same way.
	IsParts bool
	// Null records an explicit or absent null.
	Null bool
}

// Part is one content part: text or an image.
type Part struct {
	Type     string    `json:"type" validate:"required,oneof=text image_url"`
	Text     string    `json:"text,omitempty"`
	ImageURL *ImageURL `json:"image_url,omitempty"`
}

// ImageURL is an image part's source. Only data: URLs are accepted: the
// gateway fetches nothing on a user's behalf.
type ImageURL struct {
	URL    string `json:"url" validate:"required,startswith=data:image/"`
	Detail string `json:"detail,omitempty" validate:"omitempty,oneof=auto low high"`
}

// UnmarshalJSON accepts a string, null or an array of parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = Content{Null: true}
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content{Text: s}
		return nil
	case len(b) > 0 && b[0] == '[':
		var parts []Part
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		*c = Content{Parts: parts, IsParts: true}
		return nil
	}
	return typeError(b, Content{})
}

// typeError reports a JSON value of the wrong kind for a type with its own
// UnmarshalJSON, as encoding/json reports its own: the decoder adds the
// field's path, which becomes the error's param.
func typeError(b []byte, v any) error {
	kind := "value"
	if len(b) > 0 {
		switch b[0] {
		case '{':
			kind = "object"
		case '[':
			kind = "array"
		case '"':
			kind = "string"
		case 't', 'f':
			kind = "bool"
		case 'n':
			kind = "null"
		default:
			kind = "number"
		}
	}
	return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeOf(v)}
}

// MarshalJSON writes the content in the form it arrived in.
func (c Content) MarshalJSON() ([]byte, error) {
	switch {
	case c.IsParts:
		return json.Marshal(c.Parts)
	case c.Null && c.Text == "":
		return []byte("null"), nil
	}
	return json.Marshal(c.Text)
}

// String joins the text of the content (its text parts, for arrays).
func (c Content) String() string {
	if !c.IsParts {
		return c.Text
	}
	var b bytes.Buffer
	for _, p := range c.Parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// Images returns the data: URLs of the content's image parts.
func (c Content) Images() []string {
	var out []string
	for _, p := range c.Parts {
		if p.Type == "image_url" && p.ImageURL != nil {
			out = append(out, p.ImageURL.URL)
		}
	}
	return out
}

// Stop is the stop field: a string or an array of up to four strings.
type Stop []string

// UnmarshalJSON accepts a string, null or an array of strings.
func (s *Stop) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*s = nil
		return nil
	case len(b) > 0 && b[0] == '"':
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return typeError(b, Stop{})
	}
	*s = many
	return nil
}

// Tool is a function the model may call.
type Tool struct {
	Type     string      `json:"type" validate:"required,eq=function"`
	Function FunctionDef `json:"function"`
}

// FunctionDef describes a callable function.
type FunctionDef struct {
	Name        string `json:"name" validate:"required,max=64,toolname"`
	Description string `json:"description,omitempty" validate:"max=8192"`
	// Parameters is a JSON Schema object; it must be a JSON object.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Strict     *bool           `json:"strict,omitempty"`
}

// ToolChoice is "none", "auto", "required" or a named function.
type ToolChoice struct {
	Mode     string // none, auto, required; empty when Function is set
	Function string
}

// UnmarshalJSON accepts the string modes and {"type":"function",...}.
func (t *ToolChoice) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var mode string
		if err := json.Unmarshal(b, &mode); err != nil {
			return err
		}
		switch mode {
		case "none", "auto", "required":
			*t = ToolChoice{Mode: mode}
			return nil
		}
		return &json.UnmarshalTypeError{Value: "string " + strconv.Quote(mode), Type: reflect.TypeOf(ToolChoice{})}
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(b, &obj); err != nil || obj.Type != "function" || obj.Function.Name == "" {
		return typeError(b, ToolChoice{})
	}
	*t = ToolChoice{Function: obj.Function.Name}
	return nil
}

// MarshalJSON writes the choice in OpenAI's form.
func (t ToolChoice) MarshalJSON() ([]byte, error) {
	if t.Function != "" {
		return json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": t.Function}})
	}
	return json.Marshal(t.Mode)
}

// ResponseFormat is the response_format object.
type ResponseFormat struct {
	Type       string          `json:"type" validate:"required,oneof=text json_object json_schema"`
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
}

// ToolCall is a complete call in an assistant message, or one streamed
// fragment of it in a delta.
type ToolCall struct {
	// Index orders the calls of one reply; streamed fragments of the same
	// call share it. It is a pointer because a request's assistant message
	// carries no index while every streamed delta must carry one.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty" validate:"max=256"`
	Type     string       `json:"type,omitempty" validate:"omitempty,eq=function"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a call's name and JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name,omitempty" validate:"max=64"`
	Arguments string `json:"arguments"`
}
