package oaiwire_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/oaiwire/badrequests"
)

// loadBadCorpus is the shared corpus of malformed requests.
func loadBadCorpus(t testing.TB) []badrequests.Case {
	t.Helper()
	cases, err := badrequests.Cases()
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

// checkErrorShape checks an error is an *Error as the API writes it.
func checkErrorShape(t *testing.T, err error) *oaiwire.Error {
	t.Helper()
	var e *oaiwire.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not an *oaiwire.Error", err, err)
	}
	if err := checkErrorJSON(e.JSON()); err != nil {
		t.Fatal(err)
	}
	return e
}

// checkErrorJSON checks OpenAI's {"error":{message,type,param,code}} shape:
// exactly those keys, message/type/code non-empty strings, param a string
// or null.
func checkErrorJSON(b []byte) error {
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("error JSON %s: %v", b, err)
	}
	inner, ok := doc["error"]
	if !ok || len(doc) != 1 {
		return fmt.Errorf("error JSON %s: want one key \"error\"", b)
	}
	if len(inner) != 4 {
		return fmt.Errorf("error JSON %s: want exactly message, type, param, code", b)
	}
	for _, k := range []string{"message", "type", "code"} {
		var s string
		if err := json.Unmarshal(inner[k], &s); err != nil || s == "" {
			return fmt.Errorf("error JSON %s: %s must be a non-empty string", b, k)
		}
	}
	p, ok := inner["param"]
	if !ok {
		return fmt.Errorf("error JSON %s: no param", b)
	}
	var s *string
	if err := json.Unmarshal(p, &s); err != nil {
		return fmt.Errorf("error JSON %s: param must be a string or null", b)
	}
	return nil
}

func paramOf(e *oaiwire.Error) string {
	if e.Param == nil {
		return ""
	}
	return *e.Param
}

func TestDecodeRejectsMalformed(t *testing.T) {
	cases := loadBadCorpus(t)
	if len(cases) < 60 {
		t.Fatalf("corpus has %d cases, want at least 60", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			req, err := oaiwire.DecodeChatRequest(bytes.NewReader(c.Body))
			if err == nil {
				b, _ := json.Marshal(req)
				t.Fatalf("decoded a malformed request: %s", b)
			}
			e := checkErrorShape(t, err)
			if e.Status != c.Status || paramOf(e) != c.Param {
				t.Errorf("got %d param %q (%s), want %d param %q", e.Status, paramOf(e), e.Message, c.Status, c.Param)
			}
			if e.Type != oaiwire.TypeInvalidRequest {
				t.Errorf("type %q", e.Type)
			}
		})
	}
}

// validRequests must decode. check, when set, looks at the result.
var validRequests = []struct {
	name  string
	body  string
	check func(t *testing.T, r *oaiwire.ChatRequest)
}{
	{name: "minimal", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`},
	{name: "leading and trailing whitespace", body: " \n{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n\t "},
	{name: "conversation", body: `{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"developer","content":"no emoji"},
		{"role":"user","content":"hi","name":"alice"},{"role":"assistant","content":"hello"},{"role":"user","content":"grüße ✓ 日本"}]}`},
	{name: "system empty string", body: `{"model":"tiny","messages":[{"role":"system","content":""},{"role":"user","content":"hi"}]}`},
	{name: "assistant tool calls with null content and tool results", body: `{"model":"tiny","messages":[
		{"role":"user","content":"weather in Paris and Rome?"},
		{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},
		{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rain"}]}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}]}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			m := r.Messages[1]
			if !m.Content.Null || len(m.ToolCalls) != 2 || m.ToolCalls[1].Function.Arguments != `{"city":"Rome"}` {
				t.Errorf("assistant message %+v", m)
			}
			if r.Messages[3].Content.String() != "rain" {
				t.Errorf("tool result %+v", r.Messages[3].Content)
			}
		}},
	{name: "assistant tool calls with content absent", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"},
		{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":""}]}`},
	{name: "assistant tool calls with content", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"},
		{"role":"assistant","content":"let me check","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"ok"}]}`},
	{name: "assistant reasoning", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo","reasoning_content":"think"},{"role":"user","content":"and?"}]}`},
	{name: "content parts with data image", body: `{"model":"tiny","messages":[{"role":"user","content":[
		{"type":"text","text":"what is this?"},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}},
		{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}}]}]}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			c := r.Messages[0].Content
			if !c.IsParts || len(c.Images()) != 2 || c.String() != "what is this?" {
				t.Errorf("content %+v", c)
			}
		}},
	{name: "text parts in system", body: `{"model":"tiny","messages":[{"role":"system","content":[{"type":"text","text":"be brief"}]},{"role":"user","content":"hi"}]}`},
	{name: "stop string", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":"\n\n"}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if len(r.Stop) != 1 || r.Stop[0] != "\n\n" {
				t.Errorf("stop %q", r.Stop)
			}
		}},
	{name: "stop array of four", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":["a","b","c","d"]}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if len(r.Stop) != 4 {
				t.Errorf("stop %q", r.Stop)
			}
		}},
	{name: "stop null and empty array", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":null}`},
	{name: "stop empty array", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stop":[]}`},
	{name: "sampling bounds", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":2,"top_p":0,"seed":-1,
		"max_tokens":1,"max_completion_tokens":1000000,"n":1,"presence_penalty":-2,"frequency_penalty":2,"user":"u1"}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if r.Limit() != 1000000 {
				t.Errorf("limit %d", r.Limit())
			}
		}},
	{name: "nulls for optional fields", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":null,"top_p":null,"max_tokens":null,
		"n":null,"seed":null,"tools":null,"tool_choice":null,"response_format":null,"stream_options":null,"user":null}`},
	{name: "stream with usage", body: `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if !r.Stream || !r.IncludeUsage() {
				t.Errorf("stream %v usage %v", r.Stream, r.IncludeUsage())
			}
		}},
	{name: "tool choice modes", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tool_choice":"none"}`},
	{name: "tool choice auto", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto","tools":[{"type":"function","function":{"name":"f"}}]}`},
	{name: "tool choice required", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"tool_choice":"required","parallel_tool_calls":false,
		"tools":[{"type":"function","function":{"name":"f-1_x","parameters":{}}}]}`},
	{name: "tool choice function", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],
		"tool_choice":{"type":"function","function":{"name":"get_time"}},
		"tools":[{"type":"function","function":{"name":"get_weather"}},{"type":"function","function":{"name":"get_time"}}]}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if r.ToolChoice == nil || r.ToolChoice.Function != "get_time" {
				t.Errorf("tool_choice %+v", r.ToolChoice)
			}
		}},
	{name: "response format json schema", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],
		"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"},"strict":true}}}`},
	{name: "response format json object", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`},
	{name: "unknown fields ignored", body: `{"model":"tiny","messages":[{"role":"user","content":"hi","extra":1}],"logit_bias":{"1":2},
		"metadata":{"a":"b"},"store":false,"reasoning_effort":"low","service_tier":"auto"}`},
	{name: "max length model and names", body: `{"model":"` + strings.Repeat("m", 128) + `","messages":[{"role":"user","content":"hi","name":"` +
		strings.Repeat("n", 64) + `"}],"tools":[{"type":"function","function":{"name":"` + strings.Repeat("f", 64) + `"}}]}`},
	{name: "escaped unicode", body: `{"model":"tiny","messages":[{"role":"user","content":"\u00e9\ud83d\ude00 \u0000"}]}`},
	{name: "prediction string", body: `{"model":"tiny","messages":[{"role":"user","content":"rename x to y"}],
		"prediction":{"type":"content","content":"let x = 1;\nprint(x)\n"},"max_completion_tokens":64}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			p := r.Prediction
			if p == nil || p.Type != "content" || p.Content.IsParts || p.Content.String() != "let x = 1;\nprint(x)\n" {
				t.Errorf("prediction %+v", p)
			}
		}},
	{name: "prediction text parts", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],
		"prediction":{"type":"content","content":[{"type":"text","text":"one "},{"type":"text","text":"two"}]}}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if p := r.Prediction; p == nil || !p.Content.IsParts || len(p.Content.Parts) != 2 || p.Content.String() != "one two" {
				t.Errorf("prediction %+v", p)
			}
		}},
	{name: "prediction empty string", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":""}}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if p := r.Prediction; p == nil || p.Content.Null || p.Content.String() != "" {
				t.Errorf("prediction %+v", p)
			}
		}},
	{name: "prediction null", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":null}`,
		check: func(t *testing.T, r *oaiwire.ChatRequest) {
			if r.Prediction != nil {
				t.Errorf("prediction %+v", r.Prediction)
			}
		}},
	{name: "prediction with what it allows", body: `{"model":"tiny","messages":[{"role":"user","content":"hi"}],
		"prediction":{"type":"content","content":"x"},"n":1,"presence_penalty":0,"frequency_penalty":-1,"tools":[],"tool_choice":"none",
		"temperature":0.7,"seed":3,"stream":true,"stream_options":{"include_usage":true},"logprobs":true}`},
}

// textParts is a JSON array of n text parts holding size bytes of text
// together (size >= n).
func textParts(n, size int) string {
	parts := make([]string, n)
	for i := range n {
		l := size / n
		if i < size%n {
			l++
		}
		parts[i] = `{"type":"text","text":"` + strings.Repeat("p", l) + `"}`
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestDecodePredictionBounds accepts a prediction at its bounds: the most
// parts and bytes allowed, as one string or across parts. One over each is
// in the bad corpus (badrequests' generated cases).
func TestDecodePredictionBounds(t *testing.T) {
	for name, content := range map[string]string{
		"string of MaxPredictionBytes": `"` + strings.Repeat("p", oaiwire.MaxPredictionBytes) + `"`,
		"MaxPredictionParts parts":     textParts(oaiwire.MaxPredictionParts, oaiwire.MaxPredictionParts),
		"parts of MaxPredictionBytes":  textParts(oaiwire.MaxPredictionParts, oaiwire.MaxPredictionBytes),
	} {
		t.Run(name, func(t *testing.T) {
			body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":{"type":"content","content":` + content + `}}`
			r, err := oaiwire.DecodeChatRequest(strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if r.Prediction == nil || r.Prediction.Content.String() == "" {
				t.Fatalf("prediction %+v", r.Prediction)
			}
		})
	}
}

// The errors of a prediction name what to fix; the corpus checks only
// status and param.
func TestPredictionErrorMessages(t *testing.T) {
	for _, tc := range []struct {
		name, prediction, extra, want string
	}{
		{"type", `{"type":"text","content":"x"}`, "", "prediction.type must be content"},
		{"missing content", `{"type":"content"}`, "", "prediction.content is required"},
		{"image part", `{"type":"content","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AA=="}}]}`, "",
			"prediction.content[0].type must be text: a prediction is text only (no images)"},
		{"too many parts", `{"type":"content","content":` + textParts(33, 33) + `}`, "", "prediction.content has 33 parts; at most 32 are allowed"},
		{"too large", `{"type":"content","content":"` + strings.Repeat("p", 300000) + `"}`, "", "prediction.content holds 300000 bytes of text; at most 65536 (64 KiB) are allowed"},
		{"tools", `{"type":"content","content":"x"}`, `,"tools":[{"type":"function","function":{"name":"f"}}]`,
			"Unsupported parameter: 'tools' is not supported with 'prediction'"},
		{"presence penalty", `{"type":"content","content":"x"}`, `,"presence_penalty":0.1`,
			"Unsupported value: 'presence_penalty' greater than 0 is not supported with 'prediction'"},
		{"frequency penalty", `{"type":"content","content":"x"}`, `,"frequency_penalty":2`,
			"Unsupported value: 'frequency_penalty' greater than 0 is not supported with 'prediction'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"tiny","messages":[{"role":"user","content":"hi"}],"prediction":` + tc.prediction + tc.extra + `}`
			_, err := oaiwire.DecodeChatRequest(strings.NewReader(body))
			e := checkErrorShape(t, err)
			if !strings.HasPrefix(e.Message, tc.want) || e.Type != oaiwire.TypeInvalidRequest || e.Status != 400 {
				t.Errorf("got %d %s %q, want a 400 invalid_request_error starting %q", e.Status, e.Type, e.Message, tc.want)
			}
		})
	}
}

func TestDecodeAcceptsValid(t *testing.T) {
	for _, c := range validRequests {
		t.Run(c.name, func(t *testing.T) {
			r, err := oaiwire.DecodeChatRequest(strings.NewReader(c.body))
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if c.check != nil {
				c.check(t, r)
			}
			// What the gateway relays decodes again.
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := oaiwire.DecodeChatRequest(bytes.NewReader(b)); err != nil {
				t.Fatalf("re-marshalled request rejected: %v\n%s", err, b)
			}
		})
	}
}

// TestDecodeMaxBodyExactly accepts a body of exactly MaxBody bytes.
func TestDecodeMaxBodyExactly(t *testing.T) {
	valid := `{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`
	body := append([]byte(valid), bytes.Repeat([]byte(" "), oaiwire.MaxBody-len(valid))...)
	if _, err := oaiwire.DecodeChatRequest(bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
}
