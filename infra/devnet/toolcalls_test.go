package devnet_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/workerd/backend/openaicompat"
)

var update = flag.Bool("update", false, "rewrite the golden SSE transcripts in testdata")

// scriptedModel is the model name the scripted server lists.
const scriptedModel = "scripted-model"

// scriptedServer is a SCRIPTED OpenAI-compatible server, not a model: no
// tiny test model emits tool calls, so the tests that need exact tool-call
// streams put a workerd (openaicompat backend) in front of this. GET
// /v1/models lists scriptedModel; every POST /v1/chat/completions is
// recorded and answered by script, which writes all its events at once (no
// sleeps) so that transcripts are deterministic.
type scriptedServer struct {
	srv    *httptest.Server
	script func(w http.ResponseWriter)

	mu     sync.Mutex
	bodies [][]byte
}

func newScriptedServer(t testing.TB, script func(w http.ResponseWriter)) *scriptedServer {
	t.Helper()
	s := &scriptedServer{script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"`+scriptedModel+`","object":"model","owned_by":"script"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.bodies = append(s.bodies, body)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		s.script(w)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	return s
}

// requests returns the bodies the server received, decoded.
func (s *scriptedServer) requests(t *testing.T) []map[string]json.RawMessage {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[string]json.RawMessage, len(s.bodies))
	for i, b := range s.bodies {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("scripted server got a body that is not JSON: %s", b)
		}
	}
	return out
}

// scriptedWorker starts a scripted server with script and a workerd in
// front of it serving tinyModel.
func (e *env) scriptedWorker(script func(w http.ResponseWriter)) *scriptedServer {
	e.t.Helper()
	s := newScriptedServer(e.t, script)
	e.startWorker(openaicompat.New(s.srv.URL), map[string]string{tinyModel: scriptedModel})
	e.waitWorkers(tinyModel, 1)
	return s
}

// sChunk is one chat.completion.chunk of the scripted server; finish is
// the finish_reason, "" for null.
func sChunk(delta, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-scripted","object":"chat.completion.chunk","created":1700000000,"model":"` + scriptedModel +
		`","choices":[{"index":0,"delta":` + delta + `,"logprobs":null,"finish_reason":` + f + `}],"usage":null}`
}

func sUsage(prompt, completion int) string {
	return `{"id":"chatcmpl-scripted","object":"chat.completion.chunk","created":1700000000,"model":"` + scriptedModel +
		`","choices":[],"usage":{"prompt_tokens":` + itoa(prompt) + `,"completion_tokens":` + itoa(completion) +
		`,"total_tokens":` + itoa(prompt+completion) + `}}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// writeEvents writes events as one SSE body ending in [DONE], in one write.
func writeEvents(w http.ResponseWriter, events ...string) {
	var b bytes.Buffer
	for _, ev := range events {
		b.WriteString("data: " + ev + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	_, _ = w.Write(b.Bytes())
}

// Two parallel tool calls in OpenAI's streaming form: each call's first
// delta carries index, id, type and name; the arguments follow in
// fragments, the two calls interleaved, once both in one delta.
const (
	weatherID   = "call_weather_7Hq2"
	timeID      = "call_time_Zk9p"
	weatherArgs = `{"city":"Paris","unit":"celsius"}`
	timeArgs    = `{"tz":"Europe/Rome"}`
)

var toolCallEvents = []string{
	sChunk(`{"role":"assistant","content":null}`, ""),
	sChunk(`{"tool_calls":[{"index":0,"id":"`+weatherID+`","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":1,"id":"`+timeID+`","type":"function","function":{"name":"get_time","arguments":""}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":1,"function":{"arguments":"{\"tz\":"}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Par"}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":1,"function":{"arguments":"\"Europe/Rome\""}},{"index":0,"function":{"arguments":"is\",\"unit\""}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":0,"function":{"arguments":":\"celsius\"}"}}]}`, ""),
	sChunk(`{"tool_calls":[{"index":1,"function":{"arguments":"}"}}]}`, ""),
	sChunk(`{}`, "tool_calls"),
	sUsage(57, 31),
}

func toolCallScript(w http.ResponseWriter) { writeEvents(w, toolCallEvents...) }

func textScript(w http.ResponseWriter) {
	writeEvents(w,
		sChunk(`{"role":"assistant","content":""}`, ""),
		sChunk(`{"content":"Hello"}`, ""),
		sChunk(`{"content":", wor"}`, ""),
		sChunk(`{"content":"ld! ✓ \"quoted\"\n"}`, ""),
		sChunk(`{}`, "stop"),
		sUsage(12, 5))
}

// toolParams is the SDK request the tool-call tests send.
func toolParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    tinyModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Paris, and the time in Rome?")},
		Tools: []openai.ChatCompletionToolUnionParam{
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:        "get_weather",
				Description: openai.String("Current weather for a city"),
				Strict:      openai.Bool(true),
				Parameters: shared.FunctionParameters{"type": "object", "additionalProperties": false,
					"properties": map[string]any{"city": map[string]any{"type": "string"},
						"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}}},
					"required": []string{"city", "unit"}},
			}),
			openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name:       "get_time",
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"tz": map[string]any{"type": "string"}}},
			}),
		},
		ToolChoice:        openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
		ParallelToolCalls: openai.Bool(true),
	}
}

// sameJSON compares two JSON documents by value.
func sameJSON(t *testing.T, what string, got, want []byte) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v in %s", what, err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("%s: %v in %s", what, err, want)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s changed on the way:\n got  %s\n sent %s", what, got, want)
	}
}

// checkForwarded checks tools, tool_choice and parallel_tool_calls reached
// the backend as the client sent them.
func checkForwarded(t *testing.T, got map[string]json.RawMessage, p openai.ChatCompletionNewParams) {
	t.Helper()
	tools, err := json.Marshal(p.Tools)
	if err != nil {
		t.Fatal(err)
	}
	choice, err := json.Marshal(p.ToolChoice)
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, "tools", got["tools"], tools)
	sameJSON(t, "tool_choice", got["tool_choice"], choice)
	sameJSON(t, "parallel_tool_calls", got["parallel_tool_calls"], []byte("true"))
	if string(got["model"]) != `"`+scriptedModel+`"` {
		t.Errorf("backend got model %s", got["model"])
	}
}

func checkCalls(t *testing.T, calls []openai.ChatCompletionMessageToolCallUnion) {
	t.Helper()
	want := [][3]string{{weatherID, "get_weather", weatherArgs}, {timeID, "get_time", timeArgs}}
	if len(calls) != len(want) {
		t.Fatalf("%d tool calls, want 2: %+v", len(calls), calls)
	}
	for i, w := range want {
		c := calls[i]
		if c.ID != w[0] || c.Function.Name != w[1] || c.Function.Arguments != w[2] || c.Type != "function" {
			t.Errorf("call %d: id %q type %q name %q args %q, want %q function %q %q", i, c.ID, c.Type, c.Function.Name, c.Function.Arguments, w[0], w[1], w[2])
		}
	}
}

// TestToolCallsThroughNetwork streams two parallel tool calls from a
// scripted backend through workerd, the relay and the gateway to the
// official SDK, streamed and not.
func TestToolCallsThroughNetwork(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	s := e.scriptedWorker(toolCallScript)
	ctx := context.Background()

	t.Run("stream", func(t *testing.T) {
		p := toolParams()
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := e.client.Chat.Completions.NewStreaming(ctx, p)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("accumulator rejected chunk %s", stream.Current().RawJSON())
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		if len(acc.Choices) != 1 {
			t.Fatalf("%d choices", len(acc.Choices))
		}
		ch := acc.Choices[0]
		checkCalls(t, ch.Message.ToolCalls)
		if ch.FinishReason != "tool_calls" {
			t.Errorf("finish_reason %q", ch.FinishReason)
		}
		if ch.Message.Content != "" {
			t.Errorf("content %q", ch.Message.Content)
		}
		if acc.Usage.PromptTokens != 57 || acc.Usage.CompletionTokens != 31 || acc.Usage.TotalTokens != 88 {
			t.Errorf("usage %+v", acc.Usage)
		}
		reqs := s.requests(t)
		checkForwarded(t, reqs[len(reqs)-1], p)
	})

	t.Run("non-stream", func(t *testing.T) {
		p := toolParams()
		p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})
		resp, err := e.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 {
			t.Fatalf("%d choices", len(resp.Choices))
		}
		ch := resp.Choices[0]
		checkCalls(t, ch.Message.ToolCalls)
		if ch.FinishReason != "tool_calls" {
			t.Errorf("finish_reason %q", ch.FinishReason)
		}
		var raw struct {
			Choices []struct {
				Message map[string]json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(resp.RawJSON()), &raw); err != nil {
			t.Fatal(err)
		}
		if c, ok := raw.Choices[0].Message["content"]; !ok || string(c) != "null" {
			t.Errorf("message.content is %s, want null: %s", c, resp.RawJSON())
		}
		if resp.Usage.PromptTokens != 57 || resp.Usage.CompletionTokens != 31 {
			t.Errorf("usage %+v", resp.Usage)
		}
		reqs := s.requests(t)
		checkForwarded(t, reqs[len(reqs)-1], p)
	})

	if got := e.balance().Credits; got != 1000-2*10 {
		t.Errorf("balance %d, want %d", got, 1000-2*10)
	}
}

// rawStream posts body to the gateway and returns the response's SSE body.
func (e *env) rawStream(body string) (string, *http.Response) {
	e.t.Helper()
	resp := e.post("/v1/chat/completions", "Bearer "+e.apiKey, []byte(body))
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("status %d content-type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("read stream: %v", err)
	}
	return string(b), resp
}

// sseData returns the data of each event of an SSE body, skipping
// comments (keep-alives).
func sseData(t *testing.T, body string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "", strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "data: "):
			out = append(out, strings.TrimPrefix(line, "data: "))
		default:
			t.Errorf("unexpected SSE line %q", line)
		}
	}
	return out
}

var (
	idField      = regexp.MustCompile(`"id":"chatcmpl-[A-Za-z0-9_-]+"`)
	createdField = regexp.MustCompile(`"created":[0-9]+`)
)

// normalise fixes the volatile fields of a gateway transcript: the
// completion id and created time (checked to be the same on every chunk
// first), and drops keep-alive comments, which depend on timing.
//
// Nothing else needs it: the worker batches deltas into relay messages
// (~25 ms windows), but the gateway writes one SSE event per delta the
// backend produced, whatever the batching, and the scripted server writes
// its whole stream at once, so the event sequence is deterministic.
func normalise(t *testing.T, body string) string {
	t.Helper()
	ids := map[string]bool{}
	for _, m := range idField.FindAllString(body, -1) {
		ids[m] = true
	}
	created := map[string]bool{}
	for _, m := range createdField.FindAllString(body, -1) {
		created[m] = true
	}
	if len(ids) != 1 || len(created) != 1 {
		t.Errorf("chunks do not share one id and created: %v %v", ids, created)
	}
	var b strings.Builder
	for _, d := range sseData(t, body) {
		d = idField.ReplaceAllString(d, `"id":"chatcmpl-ID"`)
		d = createdField.ReplaceAllString(d, `"created":0`)
		b.WriteString("data: " + d + "\n\n")
	}
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("transcript differs from %s (run with -update to accept):\n--- got\n%s--- want\n%s", path, got, want)
	}
}

// wireChunk is a gateway chunk as it is on the wire, presence of fields
// included.
type wireChunk struct {
	Choices []struct {
		Delta struct {
			ToolCalls []map[string]json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// TestToolCallStreamGolden checks the raw SSE of a streamed tool-call reply:
// the streaming rules for tool-call deltas, then the whole transcript
// against testdata/toolcalls_stream.golden.
func TestToolCallStreamGolden(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	s := e.scriptedWorker(toolCallScript)
	tools := `[{"type":"function","function":{"name":"get_weather","description":"Current weather for a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"],"additionalProperties":false},"strict":true}},` +
		`{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}]`
	choice := `{"type":"function","function":{"name":"get_weather"}}`
	body := `{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Weather in Paris, and the time in Rome?"}],"tools":` +
		tools + `,"tool_choice":` + choice + `}`
	raw, _ := e.rawStream(body)

	// The tools and tool_choice reached the backend unchanged.
	reqs := s.requests(t)
	if len(reqs) != 1 {
		t.Fatalf("backend got %d requests", len(reqs))
	}
	sameJSON(t, "tools", reqs[0]["tools"], []byte(tools))
	sameJSON(t, "tool_choice", reqs[0]["tool_choice"], []byte(choice))

	// Tool-call deltas: 0-based index on each; id, type and function.name
	// on each call's first delta only.
	seen := map[int]bool{}
	args := map[int]string{}
	for _, d := range sseData(t, raw) {
		if d == "[DONE]" {
			continue
		}
		var c wireChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				var idx *int
				if err := json.Unmarshal(tc["index"], &idx); err != nil || idx == nil || *idx < 0 || *idx > 1 {
					t.Errorf("tool call delta without a 0-based index: %s", d)
					continue
				}
				var fn map[string]json.RawMessage
				_ = json.Unmarshal(tc["function"], &fn)
				_, hasID := tc["id"]
				_, hasType := tc["type"]
				_, hasName := fn["name"]
				first := !seen[*idx]
				seen[*idx] = true
				if first != hasID || first != hasType || first != hasName {
					t.Errorf("call %d (first delta %v): id %v type %v name %v: %s", *idx, first, hasID, hasType, hasName, d)
				}
				var a string
				_ = json.Unmarshal(fn["arguments"], &a)
				args[*idx] += a
			}
		}
	}
	if args[0] != weatherArgs || args[1] != timeArgs {
		t.Errorf("arguments %v", args)
	}
	golden(t, "toolcalls_stream.golden", normalise(t, raw))
}

// TestTextStreamUsageGolden checks the raw SSE of a plain text stream with
// include_usage against testdata/text_stream_usage.golden.
func TestTextStreamUsageGolden(t *testing.T) {
	e := newEnv(t, envOptions{credits: 1000})
	e.scriptedWorker(textScript)
	raw, _ := e.rawStream(`{"model":"tiny","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	golden(t, "text_stream_usage.golden", normalise(t, raw))
}

// TestErrorAfterStreamStart: the backend streams two deltas and then drops
// the connection. The client gets the two deltas, then exactly one error
// event and the end of the stream, no [DONE] and no finish_reason; the job
// is refunded once.
func TestErrorAfterStreamStart(t *testing.T) {
	const credits = 1000
	e := newEnv(t, envOptions{credits: credits})
	e.scriptedWorker(func(w http.ResponseWriter) {
		_, _ = io.WriteString(w, "data: "+sChunk(`{"role":"assistant","content":"Hel"}`, "")+"\n\n"+
			"data: "+sChunk(`{"content":"lo"}`, "")+"\n\n")
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		conn, _, err := rc.Hijack()
		if err != nil {
			panic(err) // the test sees a 502 and fails
		}
		conn.Close() // mid-body: the chunked stream never ends
	})
	ctx := context.Background()

	raw, _ := e.rawStream(`{"model":"tiny","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	events := sseData(t, raw)
	var text strings.Builder
	var errs []string
	var jobID string
	for i, d := range events {
		if d == "[DONE]" {
			t.Errorf("[DONE] after a failure: %q", events)
			continue
		}
		var c struct {
			ID      string `json:"id"`
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("event %s: %v", d, err)
		}
		if c.Error != nil {
			errs = append(errs, d)
			if i != len(events)-1 {
				t.Errorf("events after the error: %q", events[i+1:])
			}
			continue
		}
		if jobID == "" {
			jobID = c.ID
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				t.Errorf("finish_reason %q on a failed stream: %s", *ch.FinishReason, d)
			}
		}
	}
	if text.String() != "Hello" {
		t.Errorf("content %q, want \"Hello\"", text.String())
	}
	if len(errs) != 1 {
		t.Fatalf("%d error events, want 1: %q", len(errs), events)
	}
	if err := checkErrorDoc([]byte(errs[0])); err != nil {
		t.Error(err)
	}
	t.Logf("error event: %s", errs[0])

	// The SDK reports it as an error, not a silent end.
	stream := e.client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: tinyModel,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "worker") {
		t.Errorf("SDK stream error %v", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "Hello" {
		t.Errorf("SDK got %+v before the error", acc.Choices)
	}

	// Both jobs refunded, once each. What could refund a job again — the
	// API settling the worker's failure, the relay function settling a
	// lost worker — is over once both jobs are failed and refunded and
	// their worker is idle again with no job: only then is the balance
	// read.
	jobs := []string{jobID, acc.ID}
	waitFor(t, "both jobs failed and refunded, the worker idle", func() bool {
		for _, id := range jobs {
			j, err := e.store.GetJob(ctx, id)
			if err != nil || j.State != store.JobFailed || !j.Refunded {
				return false
			}
		}
		ws, err := e.store.Workers(ctx)
		return err == nil && len(ws) == 1 && ws[0].State == store.WorkerIdle && ws[0].Job == ""
	})
	for _, id := range jobs {
		j, _ := e.store.GetJob(ctx, id)
		if j.FailReason != "worker_error" {
			t.Errorf("job %s failed as %q, want worker_error", id, j.FailReason)
		}
	}
	if a := e.balance(); a.Credits != credits || a.TotalSpent != 0 {
		t.Errorf("credits %d spent %d, want %d and 0 (each job charged once, refunded once)", a.Credits, a.TotalSpent, credits)
	}
	st, err := e.store.Stats(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.QueueByModel) != 0 || st.JobsCompleted != 0 {
		t.Errorf("stats %+v", st)
	}
}

// checkErrorDoc checks {"error":{"message","type","param","code"}}.
func checkErrorDoc(b []byte) error {
	var doc map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil || len(doc) != 1 || doc["error"] == nil {
		return errors.New("not an error document: " + string(b))
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := doc["error"][k]; !ok {
			return errors.New("error event without " + k + ": " + string(b))
		}
	}
	return nil
}
