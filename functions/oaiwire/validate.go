package oaiwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"
)

// MaxBody is the largest request body accepted: room for long contexts and
// a few data: images, small enough that a flood of bodies cannot exhaust
// memory.
const MaxBody = 8 << 20

var (
	validate     = newValidator()
	toolNameExpr = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	if err := v.RegisterValidation("toolname", func(fl validator.FieldLevel) bool {
		return toolNameExpr.MatchString(fl.Field().String())
	}); err != nil {
		panic(err) // a programming error, caught by any test
	}
	return v
}

// DecodeChatRequest reads and validates a chat request body. Every failure
// is an *Error with status 400 (or 413 for a body over MaxBody) whose param
// names the offending field.
func DecodeChatRequest(body io.Reader) (*ChatRequest, error) {
	raw, err := io.ReadAll(io.LimitReader(body, MaxBody+1))
	if err != nil {
		return nil, InvalidRequest("", "could not read the request body: "+err.Error())
	}
	if len(raw) > MaxBody {
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest, Code: "request_too_large",
			Message: fmt.Sprintf("request body larger than %d bytes", MaxBody)}
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, InvalidRequest("", "request body is empty; send a JSON object")
	}
	if !utf8.Valid(raw) {
		return nil, InvalidRequest("", "request body is not valid UTF-8")
	}
	var req ChatRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&req); err != nil {
		return nil, jsonError(err)
	}
	if dec.More() {
		return nil, InvalidRequest("", "request body has data after the JSON object")
	}
	if err := Validate(&req); err != nil {
		return nil, err
	}
	return &req, nil
}

// Validate checks a decoded request: field rules, then the rules that
// span fields.
func Validate(r *ChatRequest) error {
	if err := validate.Struct(r); err != nil {
		var ve validator.ValidationErrors
		if errors.As(err, &ve) && len(ve) > 0 {
			return fieldError(ve[0])
		}
		return InvalidRequest("", err.Error())
	}
	for i, m := range r.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		if m.Content.IsParts && len(m.Content.Parts) == 0 {
			return InvalidRequest(p+".content", "content array is empty; send at least one part")
		}
		if m.Role != "assistant" && len(m.ToolCalls) > 0 {
			return InvalidRequest(p+".tool_calls", "only assistant messages carry tool_calls")
		}
		switch m.Role {
		case "system", "developer", "user":
			if m.Content.Null || (!m.Content.IsParts && m.Content.Text == "" && m.Role == "user") {
				return InvalidRequest(p+".content", fmt.Sprintf("%s message needs content", m.Role))
			}
		case "assistant":
			if m.Content.Null && len(m.ToolCalls) == 0 {
				return InvalidRequest(p+".content", "assistant message needs content or tool_calls")
			}
		case "tool":
			if m.ToolCallID == "" {
				return InvalidRequest(p+".tool_call_id", "tool message needs tool_call_id")
			}
			if m.Content.Null {
				return InvalidRequest(p+".content", "tool message needs content")
			}
		}
		for j, part := range m.Content.Parts {
			pp := fmt.Sprintf("%s.content[%d]", p, j)
			// The struct validator does not reach parts (Content has
			// its own JSON form), so their field rules run here.
			if err := validate.Struct(part); err != nil {
				var ve validator.ValidationErrors
				if errors.As(err, &ve) && len(ve) > 0 {
					fe := fieldError(ve[0]) // its param is the part's field: "type"
					return InvalidRequest(pp+"."+paramOr(fe.Param, ""), pp+"."+fe.Message)
				}
				return InvalidRequest(pp, err.Error())
			}
			switch part.Type {
			case "text":
				if part.ImageURL != nil {
					return InvalidRequest(pp, "text part carries an image_url")
				}
			case "image_url":
				if m.Role != "user" {
					return InvalidRequest(pp, "image parts are allowed in user messages only")
				}
				if part.ImageURL == nil {
					return InvalidRequest(pp+".image_url", "image part needs image_url")
				}
				if err := checkDataURL(part.ImageURL.URL); err != nil {
					return InvalidRequest(pp+".image_url.url", err.Error())
				}
			}
		}
		for j, tc := range m.ToolCalls {
			if tc.ID == "" || tc.Function.Name == "" {
				return InvalidRequest(fmt.Sprintf("%s.tool_calls[%d]", p, j), "tool call needs id and function.name")
			}
		}
	}
	names := make(map[string]bool, len(r.Tools))
	for i, t := range r.Tools {
		p := fmt.Sprintf("tools[%d].function", i)
		if names[t.Function.Name] {
			return InvalidRequest(p+".name", "duplicate tool name "+strconv.Quote(t.Function.Name))
		}
		names[t.Function.Name] = true
		if len(t.Function.Parameters) > 0 && !isJSONObject(t.Function.Parameters) {
			return InvalidRequest(p+".parameters", "parameters must be a JSON Schema object")
		}
	}
	if r.ToolChoice != nil {
		if r.ToolChoice.Function != "" && !names[r.ToolChoice.Function] {
			return InvalidRequest("tool_choice", "tool_choice names a function that is not in tools")
		}
		if r.ToolChoice.Mode == "required" && len(r.Tools) == 0 {
			return InvalidRequest("tool_choice", "tool_choice \"required\" needs tools")
		}
	}
	if r.StreamOptions != nil && !r.Stream {
		return InvalidRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	if rf := r.ResponseFormat; rf != nil && rf.Type == "json_schema" && !isJSONObject(rf.JSONSchema) {
		return InvalidRequest("response_format.json_schema", "json_schema must be an object")
	}
	return validatePrediction(r)
}

// validatePrediction checks the prediction (Predicted Outputs), whose type
// the field rules checked: its content is text, a string or text parts,
// within MaxPredictionParts and MaxPredictionBytes, and the request asks
// for nothing OpenAI refuses together with a prediction.
func validatePrediction(r *ChatRequest) error {
	p := r.Prediction
	if p == nil {
		return nil
	}
	c := p.Content
	switch {
	case c.Null:
		return InvalidRequest("prediction.content", "prediction.content is required: the text the reply is expected to repeat, a string or an array of text parts")
	case c.IsParts && len(c.Parts) == 0:
		return InvalidRequest("prediction.content", "prediction.content array is empty; send at least one text part")
	case len(c.Parts) > MaxPredictionParts:
		return InvalidRequest("prediction.content", fmt.Sprintf("prediction.content has %d parts; at most %d are allowed (join the text into fewer parts)",
			len(c.Parts), MaxPredictionParts))
	}
	size := len(c.Text)
	for j, part := range c.Parts {
		pp := fmt.Sprintf("prediction.content[%d]", j)
		switch {
		case part.Type == "":
			return InvalidRequest(pp+".type", pp+".type is required")
		case part.Type != "text":
			return InvalidRequest(pp+".type", pp+".type must be text: a prediction is text only (no images)")
		case part.ImageURL != nil:
			return InvalidRequest(pp, "text part carries an image_url")
		}
		size += len(part.Text)
	}
	if size > MaxPredictionBytes {
		return InvalidRequest("prediction.content", fmt.Sprintf("prediction.content holds %d bytes of text; at most %d (64 KiB) are allowed",
			size, MaxPredictionBytes))
	}
	// What OpenAI's guide lists as not supported with a prediction, as far
	// as this gateway accepts it: n above 1 is refused for every request
	// (the n rule), and logprobs, audio and modalities are not fields the
	// gateway takes (unknown fields are ignored). max_completion_tokens,
	// which the guide lists too, stays allowed: here it caps a predicted
	// reply as it caps any other, and refusing it would leave a client
	// only the deprecated max_tokens to cap one with.
	switch {
	case len(r.Tools) > 0:
		return InvalidRequest("tools", "Unsupported parameter: 'tools' is not supported with 'prediction': Predicted Outputs do not support function calling. Send tools or a prediction, not both.")
	case r.PresencePenalty != nil && *r.PresencePenalty > 0:
		return InvalidRequest("presence_penalty", penaltyWithPrediction("presence_penalty"))
	case r.FrequencyPenalty != nil && *r.FrequencyPenalty > 0:
		return InvalidRequest("frequency_penalty", penaltyWithPrediction("frequency_penalty"))
	}
	return nil
}

// penaltyWithPrediction is the refusal of a positive penalty with a
// prediction.
func penaltyWithPrediction(param string) string {
	return "Unsupported value: '" + param + "' greater than 0 is not supported with 'prediction' (Predicted Outputs). " +
		"Leave " + param + " out or at most 0, or send no prediction."
}

func isJSONObject(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(b, &m) == nil
}

// checkDataURL accepts data:image/<type>;base64,<payload> only.
func checkDataURL(u string) error {
	rest, ok := strings.CutPrefix(u, "data:image/")
	if !ok {
		return errors.New("only data:image/… URLs are accepted; the gateway fetches nothing")
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") || payload == "" {
		return errors.New("image data URL must be data:image/<type>;base64,<data>")
	}
	return nil
}

func jsonError(err error) *Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		return InvalidRequest(field, fmt.Sprintf("%s: expected %s, got JSON %s", orBody(field), expected(typeErr.Type), typeErr.Value))
	case errors.As(err, &syntaxErr):
		return InvalidRequest("", fmt.Sprintf("request body is not valid JSON (at byte %d): %v", syntaxErr.Offset, syntaxErr))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return InvalidRequest("", "request body is truncated JSON")
	}
	return InvalidRequest("", "request body: "+err.Error())
}

// expected names what a field of type t accepts.
func expected(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(Content{}):
		return "a string, an array of content parts or null"
	case reflect.TypeOf(Stop{}):
		return "a string or an array of strings"
	case reflect.TypeOf(ToolChoice{}):
		return `"none", "auto", "required" or {"type":"function","function":{"name":…}}`
	case nil:
		return "a value"
	}
	switch t.Kind() {
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Pointer:
		return expected(t.Elem())
	}
	return t.String()
}

func paramOr(p *string, def string) string {
	if p == nil {
		return def
	}
	return *p
}

func orBody(field string) string {
	if field == "" {
		return "request body"
	}
	return field
}

func fieldError(fe validator.FieldError) *Error {
	// Namespace is ChatRequest.messages[0].role; drop the struct name.
	param := fe.Namespace()
	if _, rest, ok := strings.Cut(param, "."); ok {
		param = rest
	}
	var msg string
	switch fe.Tag() {
	case "required":
		msg = param + " is required"
	case "oneof":
		msg = fmt.Sprintf("%s must be one of [%s]", param, strings.ReplaceAll(fe.Param(), " ", ", "))
	case "min":
		msg = fmt.Sprintf("%s must be at least %s", param, fe.Param())
	case "max":
		msg = fmt.Sprintf("%s must be at most %s", param, fe.Param())
	case "eq":
		msg = fmt.Sprintf("%s must be %s", param, fe.Param())
	case "toolname":
		msg = param + " must be 1-64 characters of a-z, A-Z, 0-9, _ and -"
	case "startswith":
		msg = param + " must be a data:image/… URL"
	default:
		msg = fmt.Sprintf("%s is invalid (%s)", param, fe.Tag())
	}
	return InvalidRequest(param, msg)
}
