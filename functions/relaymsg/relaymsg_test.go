package relaymsg

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/shard"
)

var update = flag.Bool("update", false, "rewrite the FuzzDecode seed corpus under testdata/")

func ptr[T any](v T) *T { return &v }

// tkt is a well-formed job ticket (the relay checks its MAC, Decode only
// its shape).
var tkt = strings.Repeat("T", TicketLen)

// samples is one valid value of every message type, as its sender fills it.
func samples() []any {
	return []any{
		&Register{Models: []string{"llama3.1:8b", "qwen3:32b"}, Agent: "workerd/0.1.0"},
		&Register{Agent: "workerd/0.1.0 builtin", Ring: true},
		&Heartbeat{},
		&Drain{},
		&Chunk{Job: "job_1", To: "TWegAcC4EowCHnA=", From: "R1kmxc2VNjMCFIA=", Seq: 0, Deltas: []oaiwire.Delta{
			{Role: "assistant", Content: "Hel"},
			{Content: "lo <b> & \u2028 ünïcödé"},
			{Reasoning: "thinking"},
			{ToolCalls: []oaiwire.ToolCall{{Index: ptr(0), ID: "call_1", Type: "function", Function: oaiwire.FunctionCall{Name: "get_weather", Arguments: `{"city":`}}}},
		}, Ticket: tkt},
		&Done{Job: "job_1", To: "TWegAcC4EowCHnA=", Seq: 4, FinishReason: "tool_calls",
			Usage: oaiwire.Usage{PromptTokens: 12, CompletionTokens: 34, TotalTokens: 46}, Ticket: tkt,
			Receipt: sampleReceipt()},
		&Fail{Job: "job_1", To: "TWegAcC4EowCHnA=", Seq: 2, Code: "backend_unavailable", Message: "ollama: connection refused", Ticket: tkt},
		&Registered{Conn: "R1kmxc2VNjMCFIA=", Models: []string{"llama3.1:8b"}, Ignored: []string{"qwen3:32b"},
			Ring: []RingOffer{{Model: "tiny-ring", Hash: shard.Hash{9}, BlobURL: "https://blobs.example/tiny-ring"}}},
		&Job{Job: "job_1", ReplyTo: "TWegAcC4EowCHnA=", Model: "llama3.1:8b",
			Request: oaiwire.ChatRequest{
				Model: "llama3.1:8b",
				Messages: []oaiwire.Message{
					{Role: "system", Content: oaiwire.Content{Text: "Be brief."}},
					{Role: "user", Content: oaiwire.Content{IsParts: true, Parts: []oaiwire.Part{
						{Type: "text", Text: "What is this?"},
						{Type: "image_url", ImageURL: &oaiwire.ImageURL{URL: "data:image/png;base64,iVBORw0KGgo=", Detail: "low"}},
					}}},
					{Role: "assistant", Content: oaiwire.Content{Null: true}, ToolCalls: []oaiwire.ToolCall{
						{ID: "call_1", Type: "function", Function: oaiwire.FunctionCall{Name: "get_weather", Arguments: `{"city":"Oslo"}`}}}},
					{Role: "tool", ToolCallID: "call_1", Content: oaiwire.Content{Text: "12°C"}},
				},
				Stream:        true,
				StreamOptions: &oaiwire.StreamOptions{IncludeUsage: true},
				MaxTokens:     ptr[int64](256),
				Temperature:   ptr(0.7),
				TopP:          ptr(0.9),
				Seed:          ptr[int64](42),
				Stop:          oaiwire.Stop{"\n\n"},
				Tools: []oaiwire.Tool{{Type: "function", Function: oaiwire.FunctionDef{
					Name: "get_weather", Description: "Weather for a city",
					Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}},
				ToolChoice:     &oaiwire.ToolChoice{Mode: "auto"},
				ResponseFormat: &oaiwire.ResponseFormat{Type: "text"},
			},
			Deadline: time.Date(2026, 11, 29, 16, 1, 34, 500_000_000, time.UTC), BudgetMillis: 600_000, Ticket: tkt},
		&Cancel{Job: "job_1"},
		&Error{Code: "bad_message", Message: "relaymsg: unknown message type \"x\""},
		&Assign{Job: "job_1", Worker: "R1kmxc2VNjMCFIA="},
		&Lost{Job: "job_1", Worker: "R1kmxc2VNjMCFIA="},
		&Hello{},
		&Welcome{Conn: "TWegAcC4EowCHnA="},
		&ImageJob{Job: "img_1", ReplyTo: "TWegAcC4EowCHnA=", Model: "c0mpute-image",
			Request:  ImageRequest{Prompt: "a lighthouse at dusk, <oil> & ink", Width: 1024, Height: 768},
			Deadline: time.Date(2026, 11, 29, 16, 1, 34, 500_000_000, time.UTC), BudgetMillis: 120_000, Ticket: tkt},
		&Chunk{Job: "img_1", To: "TWegAcC4EowCHnA=", From: "R1kmxc2VNjMCFIA=", Seq: 1,
			Image: &ImagePart{Parts: 2, Data: []byte("\x89PNG\r\n\x1a\n")}, Ticket: tkt},
		&RingAnnounce{Model: "tiny-ring", Advertise: "203.0.113.7:7001",
			Capability: shard.Capability{Node: shard.PublicKey{1}, Model: shard.Hash{2}, VRAMBytes: 8 << 30, LayerMicros: 900, UplinkBps: 100_000_000, Time: 1764000000000}},
		&RingProbe{Model: "tiny-ring", Peers: []RingPeer{{Node: shard.PublicKey{3}, Addr: "198.51.100.2:7001"}}},
		&RingRTT{Model: "tiny-ring", Row: shard.RTTRow{From: shard.PublicKey{1}, Time: 1764000000000, Peers: []shard.RTTPeer{{To: shard.PublicKey{3}, Micros: 25_000}}}},
		&RingAssign{Model: "tiny-ring", Hash: shard.Hash{4}, BlobURL: "https://blobs.example/tiny-ring",
			Plan:     shard.Plan{Version: shard.PlanVersion, Layers: 4, Stages: 1, Members: []shard.Member{{Role: shard.RolePrimary, Node: shard.PublicKey{1}, LayerEnd: 4}}},
			Manifest: shard.Manifest{Name: "tiny-ring", Layers: []shard.Blob{{Hash: shard.Hash{5}, Size: 4096}}},
			Peers:    []RingPeer{{Node: shard.PublicKey{1}, Addr: "203.0.113.7:7001"}}},
		&RingReady{Model: "tiny-ring", Acceptance: shard.Acceptance{Plan: shard.Hash{4}, Node: shard.PublicKey{1}, Role: shard.RolePrimary, Time: 1764000000000}},
		&RingRefuse{Model: "tiny-ring", Hash: shard.Hash{4}, Code: "plan_mismatch", Message: "recomputed another plan"},
		&RingServe{Model: "tiny-ring", Hash: shard.Hash{4}},
		&RingDisband{Model: "tiny-ring", Hash: shard.Hash{4}, Reason: "member_left"},
		&Done{Job: "job_2", To: "TWegAcC4EowCHnA=", Seq: 9, FinishReason: "stop", Ticket: tkt, Receipt: sampleReceipt(),
			Ring: &RingDone{Plan: shard.Hash{4}, Input: shard.Hash{6}, Output: shard.Hash{7}, TokenEnd: 12,
				Receipts: []shard.Receipt{{Job: "job_2", Plan: shard.Hash{4}, LayerEnd: 4, TokenEnd: 12, Time: 1764000000000, Signer: shard.PublicKey{1}}}}},
	}
}

func TestRoundTripEveryType(t *testing.T) {
	covered := map[string]bool{}
	for _, m := range samples() {
		name := fmt.Sprintf("%T", m)
		t.Run(name, func(t *testing.T) {
			b, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(b)
			if err != nil {
				t.Fatalf("Decode(%s): %v", b, err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("round trip changed the message:\n got %#v\nwant %#v", got, m)
			}
			h, typ := headerOf(got)
			if h.V != Version || h.Type != typ {
				t.Fatalf("header %+v, want v %d type %s", *h, Version, typ)
			}
			covered[typ] = true
		})
	}
	for typ := range constructors {
		if !covered[typ] {
			t.Errorf("message type %q has no round-trip sample", typ)
		}
	}
}

func TestEncodeStampsHeader(t *testing.T) {
	b, err := Encode(&Heartbeat{Header: Header{V: 7, Type: TypeJob}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"v":1,"type":"heartbeat"}` {
		t.Fatalf("Encode = %s", b)
	}
}

func TestEncodeErrors(t *testing.T) {
	huge := &Chunk{Job: "j", To: "c", Deltas: []oaiwire.Delta{{Content: strings.Repeat("x", MaxMessage)}}}
	tests := []struct {
		name string
		m    any
	}{
		{"nil", nil},
		{"value, not pointer", Heartbeat{}},
		{"not a message", &struct{ Header }{}},
		{"header alone", &Header{}},
		{"string", "heartbeat"},
	}
	for _, tt := range tests {
		if _, err := Encode(tt.m); err == nil {
			t.Errorf("%s: Encode succeeded", tt.name)
		}
	}
	if _, err := Encode(huge); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized chunk: %v, want ErrTooLarge", err)
	}
}

// job returns a job message whose request is changed by edit.
func job(edit string) string {
	req := `{"model":"m","messages":[{"role":"user","content":"hi"}]` + edit + `}`
	return `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","deadline":"2026-01-01T00:00:00Z","ticket":"` + tkt + `","request":` + req + `}`
}

func TestDecodeErrors(t *testing.T) {
	chunk := func(extra string) string {
		return `{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"ticket":"` + tkt + `","deltas":[{"content":"x"}]` + extra + `}`
	}
	tests := []struct {
		name, in string
		want     string // a substring of the error
	}{
		// not a message
		{"empty", ``, "not a JSON object"},
		{"whitespace", "  \n", "not a JSON object"},
		{"truncated", `{"v":1,"type":"heartbeat"`, "not a JSON object"},
		{"array", `[{"v":1,"type":"heartbeat"}]`, "not a JSON object"},
		{"string", `"heartbeat"`, "not a JSON object"},
		{"number", `1`, "not a JSON object"},
		{"null", `null`, "version 0"},

		// version
		{"no version", `{"type":"heartbeat"}`, "version 0"},
		{"version 2", `{"v":2,"type":"heartbeat"}`, "version 2"},
		{"version 0", `{"v":0,"type":"heartbeat"}`, "version 0"},
		{"version string", `{"v":"1","type":"heartbeat"}`, "not a JSON object"},
		{"version float", `{"v":1.5,"type":"heartbeat"}`, "not a JSON object"},

		// type
		{"no type", `{"v":1}`, "unknown message type"},
		{"unknown type", `{"v":1,"type":"shutdown"}`, "unknown message type"},
		{"type case", `{"v":1,"type":"Heartbeat"}`, "unknown message type"},
		{"type number", `{"v":1,"type":7}`, "not a JSON object"},

		// trailing data
		{"second object", `{"v":1,"type":"heartbeat"}{"v":1,"type":"heartbeat"}`, "after top-level value"},
		{"trailing garbage", `{"v":1,"type":"heartbeat"} x`, "after top-level value"},
		{"trailing bracket", `{"v":1,"type":"heartbeat"}]`, "after top-level value"},

		// size
		{"over 128 KiB", `{"v":1,"type":"heartbeat"}` + strings.Repeat(" ", MaxMessage), "larger than 128 KiB"},

		// missing or invalid fields, per type
		{"register no models", `{"v":1,"type":"register"}`, "no models, and not a ring member"},
		{"register empty models", `{"v":1,"type":"register","models":[]}`, "no models, and not a ring member"},
		{"register empty model name", `{"v":1,"type":"register","models":[""]}`, "Models[0]"},
		{"register model name too long", `{"v":1,"type":"register","models":["` + strings.Repeat("m", 129) + `"]}`, "Models[0]"},
		{"register too many models", `{"v":1,"type":"register","models":[` + strings.TrimSuffix(strings.Repeat(`"m",`, 65), ",") + `]}`, "Models"},
		{"register agent too long", `{"v":1,"type":"register","models":["m"],"agent":"` + strings.Repeat("a", 129) + `"}`, "Agent"},
		{"register models wrong type", `{"v":1,"type":"register","models":"m"}`, "cannot unmarshal"},
		{"chunk no job", `{"v":1,"type":"chunk","to":"c","seq":0,"deltas":[{"content":"x"}]}`, "Job"},
		{"chunk job too long", chunk(`,"job":"` + strings.Repeat("j", 65) + `"`), "Job"},
		{"chunk no to", `{"v":1,"type":"chunk","job":"j","seq":0,"deltas":[{"content":"x"}]}`, "To"},
		{"chunk no deltas", `{"v":1,"type":"chunk","job":"j","to":"c","seq":0}`, "Deltas"},
		{"chunk empty deltas", `{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[]}`, "Deltas"},
		{"chunk negative seq", chunk(`,"seq":-1`), "Seq"},
		{"chunk seq string", chunk(`,"seq":"1"`), "cannot unmarshal"},
		{"chunk seq float", chunk(`,"seq":1.5`), "cannot unmarshal"},
		{"chunk deltas object", `{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":{"content":"x"}}`, "cannot unmarshal"},
		{"chunk tool call index string", chunk(`,"deltas":[{"tool_calls":[{"index":"0"}]}]`), "cannot unmarshal"},
		{"done no finish reason", `{"v":1,"type":"done","job":"j","to":"c","seq":1}`, "FinishReason"},
		{"done no receipt", doneWith(nil), "Receipt"},
		{"done null receipt", doneRaw(`null`), "Receipt"},
		{"done receipt not an object", doneRaw(`"signed"`), "cannot unmarshal"},
		{"done receipt no job", doneWith(func(r map[string]any) { delete(r, "job") }), "Receipt.Job"},
		{"done receipt job too long", doneWith(func(r map[string]any) { r["job"] = strings.Repeat("j", 65) }), "Receipt.Job"},
		{"done receipt no worker", doneWith(func(r map[string]any) { delete(r, "worker") }), "Receipt.Worker"},
		{"done receipt worker too long", doneWith(func(r map[string]any) { r["worker"] = strings.Repeat("W", 45) }), "Receipt.Worker"},
		{"done receipt worker too short", doneWith(func(r map[string]any) { r["worker"] = "W" }), "Receipt.Worker"},
		{"done receipt no model", doneWith(func(r map[string]any) { delete(r, "model") }), "Receipt.Model"},
		{"done receipt model too long", doneWith(func(r map[string]any) { r["model"] = strings.Repeat("m", 129) }), "Receipt.Model"},
		{"done receipt digest too long", doneWith(func(r map[string]any) { r["model_digest"] = strings.Repeat("d", 129) }), "Receipt.ModelDigest"},
		{"done receipt no request hash", doneWith(func(r map[string]any) { delete(r, "request_sha256") }), "Receipt.RequestSHA256"},
		{"done receipt short request hash", doneWith(func(r map[string]any) { r["request_sha256"] = "abcd" }), "Receipt.RequestSHA256"},
		{"done receipt request hash not hex", doneWith(func(r map[string]any) { r["request_sha256"] = strings.Repeat("g", 64) }), "Receipt.RequestSHA256"},
		{"done receipt request hash upper case", doneWith(func(r map[string]any) { r["request_sha256"] = strings.Repeat("A", 64) }), "Receipt.RequestSHA256"},
		{"done receipt no output hash", doneWith(func(r map[string]any) { delete(r, "output_sha256") }), "Receipt.OutputSHA256"},
		{"done receipt long output hash", doneWith(func(r map[string]any) { r["output_sha256"] = strings.Repeat("a", 65) }), "Receipt.OutputSHA256"},
		{"done receipt negative deltas", doneWith(func(r map[string]any) { r["deltas"] = -1 }), "Receipt.Deltas"},
		{"done receipt huge deltas", doneWith(func(r map[string]any) { r["deltas"] = MaxReceiptCount + 1 }), "Receipt.Deltas"},
		{"done receipt deltas string", doneWith(func(r map[string]any) { r["deltas"] = "3" }), "cannot unmarshal"},
		{"done receipt negative prompt tokens", doneWith(func(r map[string]any) { r["prompt_tokens"] = -1 }), "Receipt.PromptTokens"},
		{"done receipt huge completion tokens", doneWith(func(r map[string]any) { r["completion_tokens"] = int64(1) << 62 }), "Receipt.CompletionTokens"},
		{"done receipt negative first token", doneWith(func(r map[string]any) { r["first_token_ms"] = -5 }), "Receipt.FirstTokenMillis"},
		{"done receipt total over a day", doneWith(func(r map[string]any) { r["total_ms"] = MaxReceiptMillis + 1 }), "Receipt.TotalMillis"},
		{"done receipt no signature", doneWith(func(r map[string]any) { delete(r, "signature") }), "Receipt.Signature"},
		{"done receipt short signature", doneWith(func(r map[string]any) { r["signature"] = "abc" }), "Receipt.Signature"},
		{"done receipt long signature", doneWith(func(r map[string]any) { r["signature"] = strings.Repeat("s", 89) }), "Receipt.Signature"},
		{"done bad finish reason", `{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"bored"}`, "FinishReason"},
		{"done usage wrong type", `{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"stop","usage":[]}`, "cannot unmarshal"},
		{"fail no code", `{"v":1,"type":"fail","job":"j","to":"c","seq":1}`, "Code"},
		{"fail message too long", `{"v":1,"type":"fail","job":"j","to":"c","seq":1,"code":"x","message":"` + strings.Repeat("m", 1025) + `"}`, "Message"},
		{"registered no conn", `{"v":1,"type":"registered","models":["m"]}`, "Conn"},
		{"job no reply_to", `{"v":1,"type":"job","job":"j","model":"m","request":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, "ReplyTo"},
		{"job no model", `{"v":1,"type":"job","job":"j","reply_to":"c","request":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, "Model"},
		{"job request no messages", `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","ticket":"` + tkt + `","request":{"model":"m"}}`, "job request"},
		{"job request bad role", `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","ticket":"` + tkt + `","request":{"model":"m","messages":[{"role":"god","content":"hi"}]}}`, "job request"},
		{"job request bad tool name", job(`,"tools":[{"type":"function","function":{"name":"bad name!"}}]`), "job request"},
		{"job request duplicate tools", job(`,"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]`), "job request"},
		{"job request temperature", job(`,"temperature":3`), "job request"},
		{"job request wrong type", `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","ticket":"` + tkt + `","request":[]}`, "cannot unmarshal"},
		{"job deadline not a time", `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","deadline":"tomorrow","request":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, "job"},
		{"chunk no ticket", `{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[{"content":"x"}]}`, "Ticket"},
		{"chunk short ticket", chunk(`,"ticket":"abc"`), "Ticket"},
		{"done no ticket", `{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"stop","receipt":` + receiptJSON(nil) + `}`, "Ticket"},
		{"fail no ticket", `{"v":1,"type":"fail","job":"j","to":"c","seq":1,"code":"x"}`, "Ticket"},
		{"job no ticket", `{"v":1,"type":"job","job":"j","reply_to":"c","model":"m","request":{"model":"m","messages":[{"role":"user","content":"hi"}]}}`, "Ticket"},
		{"job negative budget", job(``)[:len(job(``))-1] + `,"budget_ms":-1}`, "BudgetMillis"},
		{"chunk negative seq", chunk(`,"seq":-1`), "Seq"},
		{"cancel no job", `{"v":1,"type":"cancel"}`, "Job"},
		{"error no code", `{"v":1,"type":"error","message":"m"}`, "Code"},
		{"assign no worker", `{"v":1,"type":"assign","job":"j"}`, "Worker"},
		{"lost no job", `{"v":1,"type":"lost","worker":"w"}`, "Job"},
		{"welcome no conn", `{"v":1,"type":"welcome"}`, "Conn"},
		{"heartbeat field wrong type", `{"v":1,"type":"heartbeat","type":1}`, "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.in))
			if err == nil {
				t.Fatalf("Decode succeeded: %#v", m)
			}
			if m != nil {
				t.Errorf("Decode returned %#v with the error", m)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

func TestDecodeSizeBoundary(t *testing.T) {
	msg := `{"v":1,"type":"heartbeat"}`
	exact := msg + strings.Repeat(" ", MaxMessage-len(msg))
	if _, err := Decode([]byte(exact)); err != nil {
		t.Fatalf("a message of exactly MaxMessage bytes: %v", err)
	}
	if _, err := Decode([]byte(exact + " ")); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("one byte over: %v, want ErrTooLarge", err)
	}
}

// A job with tools used to panic: this package's validator descended into
// the request and met oaiwire's custom "toolname" tag.
func TestDecodeJobWithTools(t *testing.T) {
	m, err := Decode([]byte(job(`,"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}}`)))
	if err != nil {
		t.Fatal(err)
	}
	if j := m.(*Job); len(j.Request.Tools) != 1 || j.Request.ToolChoice.Function != "get_weather" {
		t.Fatalf("decoded %+v", j.Request)
	}
}

// Decode checks the size of what it received; Encode checks the size of
// what it produces, which may add From and still escapes U+2028 and U+2029
// (3 bytes each) as \u2028 (6). A message that decodes within the limit
// can therefore fail to re-encode: whoever forwards a decoded message must
// handle ErrTooLarge. HTML characters no longer grow: Encode leaves <, >
// and & as they are.
func TestReencodeCanExceedLimit(t *testing.T) {
	prefix := `{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"ticket":"` + tkt + `","deltas":[{"content":"`
	suffix := `"}]}`
	fill := MaxMessage - len(prefix) - len(suffix)
	html := prefix + strings.Repeat("<", fill) + suffix
	m, err := Decode([]byte(html))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Encode(m); err != nil || len(b) != len(html) {
		t.Fatalf("re-encoding %d bytes of '<': %d bytes, %v; want the same size", len(html), len(b), err)
	}
	sep := prefix + strings.Repeat("\u2028", fill/3) + suffix
	if m, err = Decode([]byte(sep)); err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(m); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("re-encoding %d bytes of U+2028: %v, want ErrTooLarge", len(sep), err)
	}
}

// checkReencode is FuzzDecode's property: a decoded message re-encodes,
// decodes again to a message with the same encoding, and that encoding is a
// fixed point.
func checkReencode(t *testing.T, in []byte) {
	m1, err := Decode(in)
	if err != nil {
		if m1 != nil {
			t.Fatalf("Decode returned %#v with error %v", m1, err)
		}
		return
	}
	b1, err := Encode(m1)
	if errors.Is(err, ErrTooLarge) && len(in) > MaxMessage/6 {
		return // escaping can grow a large message past the limit; see TestReencodeCanExceedLimit
	}
	if err != nil {
		t.Fatalf("Decode accepted %q but Encode failed: %v", in, err)
	}
	m2, err := Decode(b1)
	if err != nil {
		t.Fatalf("re-encoded message does not decode: %v\ninput   %q\nencoded %q", err, in, b1)
	}
	b2, err := Encode(m2)
	if err != nil {
		t.Fatalf("second Encode: %v", err)
	}
	if !bytes.Equal(b1, b2) {
		t.Fatalf("decoded again to a different value:\ninput %q\nfirst  %q\nsecond %q", in, b1, b2)
	}
	if j1, ok := m1.(*Job); ok {
		// The worker's request hash (over the request it decoded) is the
		// gateway's (over the request it sent).
		h1, err1 := RequestHash(&j1.Request)
		h2, err2 := RequestHash(&m2.(*Job).Request)
		if err1 != nil || err2 != nil || h1 != h2 {
			t.Fatalf("request hash changed on the way: %s (%v), then %s (%v)\ninput %q", h1, err1, h2, err2, in)
		}
	}
	m3, err := Decode(b2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m2, m3) {
		t.Fatalf("canonical encoding is not a fixed point:\n%#v\n%#v", m2, m3)
	}
}

func FuzzDecode(f *testing.F) {
	// The seed corpus under testdata/fuzz/FuzzDecode holds every sample
	// and the invalid inputs of TestDecodeErrors; -update rewrites it.
	f.Fuzz(checkReencode)
}

func TestSeedCorpus(t *testing.T) {
	var seeds [][]byte
	for _, m := range samples() {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	seeds = append(seeds,
		[]byte(`{"v":1,"type":"heartbeat"} x`),
		[]byte(`{"v":2,"type":"heartbeat"}`),
		[]byte(`{"v":1,"type":"nope"}`),
		[]byte(`{"v":1,"type":"register","models":[""]}`),
		[]byte(`{"V":1,"TYPE":"register","Models":["m"],"models":["n"]}`),
		[]byte(`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[{"tool_calls":[{"index":0}]}]}`),
		[]byte(job(`,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"stop":[],"content":null`)),
		[]byte(job(`,"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"x","function":{"name":"f"}}]},{"role":"user","content":[]}]`)),
		[]byte(`{"v":1,"type":"registered","conn":"c","ignored":[]}`),
		[]byte(`{"v":1,"type":"done","job":"j","to":"c","seq":1,"finish_reason":"stop","usage":{"total_tokens":1e3}}`),
		[]byte(doneWith(nil)),
		[]byte(doneWith(func(r map[string]any) { r["deltas"] = 1e3; r["model_digest"] = "<&>" })),
		[]byte("{\"v\":1,\"type\":\"fail\",\"job\":\"j\",\"to\":\"c\",\"code\":\"\xff\\ud800\"}"),
	)
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range seeds {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, s := range seeds {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)))
		if err != nil || string(got) != want {
			t.Fatalf("seed-%02d is missing or stale (run go test -run TestSeedCorpus -update): %v", i, err)
		}
		checkReencode(t, s)
	}
}
