package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// sink is where a reply goes: an SSE stream or one JSON document.
type sink interface {
	// keepAlive is called while the job waits for a worker.
	keepAlive()
	// delta writes (or buffers) one increment of the reply. What a
	// stream writes reaches the client at the next push.
	delta(d oaiwire.Delta) error
	// push sends the client what delta wrote: the deltas of one relayed
	// chunk go in one write (and one system call), not one each.
	push() error
	// finish ends a complete reply.
	finish(reason string, usage oaiwire.Usage) error
	// fail ends the reply with an error: a real HTTP status while nothing
	// was written yet (the returned error, written by the one error
	// writer), else one error event.
	fail(err error) error
	// committed reports whether part of the reply reached the client, so
	// the job can no longer move to another worker.
	committed() bool
	// reset drops what was buffered from a worker that was lost.
	reset()
}

// streamSink writes chat.completion.chunk events.
type streamSink struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	id, model    string
	created      int64
	includeUsage bool
	headersSent  bool
	roleSent     bool
	tokensSent   bool
	sawToolCalls bool
	// rm counts an error sent as an event (one returned is counted by
	// the error writer).
	rm *requestMetrics
	// head and tail are what surrounds a delta in its event (frame);
	// buf holds the event being written, reused from one to the next.
	head, tail, buf []byte
}

func newStreamSink(w http.ResponseWriter, id, model string, created time.Time, includeUsage bool, rm *requestMetrics) *streamSink {
	return &streamSink{w: w, rc: http.NewResponseController(w), id: id, model: model,
		created: created.Unix(), includeUsage: includeUsage, rm: rm}
}

func (s *streamSink) start() {
	if s.headersSent {
		return
	}
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.headersSent = true
}

func (s *streamSink) keepAlive() {
	s.start()
	_, _ = s.w.Write([]byte(": keep-alive\n\n")) // a failed write shows up at the next delta
	_ = s.flush()
}

// usageNull is what every chunk carries when the client asked for usage.
var usageNull = json.RawMessage("null")

func (s *streamSink) chunk(d oaiwire.Delta, finish *string) chunkJSON {
	c := chunkJSON{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []oaiwire.ChunkChoice{{Index: 0, Delta: d, FinishReason: finish}}}
	if s.includeUsage {
		c.Usage = usageNull
	}
	return c
}

// chunkJSON is oaiwire.Chunk with usage as raw JSON: null on every chunk
// of a stream that asked for usage, absent otherwise.
type chunkJSON struct {
	ID      string                `json:"id"`
	Object  string                `json:"object"`
	Created int64                 `json:"created"`
	Model   string                `json:"model"`
	Choices []oaiwire.ChunkChoice `json:"choices"`
	Usage   any                   `json:"usage,omitempty"`
}

// event writes one event and flushes it to the client.
func (s *streamSink) event(v any) error {
	if err := s.write(v); err != nil {
		return err
	}
	return s.flush()
}

// write writes one event into the response's buffer; flush sends it.
func (s *streamSink) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf = append(append(append(s.buf[:0], "data: "...), b...), '\n', '\n')
	_, err = s.w.Write(s.buf)
	s.buf = oaiwire.KeepBuffer(s.buf)
	return err
}

// writeDelta writes the event of one delta, the role's or a token's: what
// write(s.chunk(d, nil)) writes, byte for byte, but built in place for a
// delta without tool calls (every token of a plain reply) instead of
// marshalled: no reflection and no allocation per token.
func (s *streamSink) writeDelta(d oaiwire.Delta) error {
	if s.head == nil {
		s.head, s.tail = s.frame()
	}
	b, ok := oaiwire.AppendDelta(append(s.buf[:0], s.head...), d)
	if !ok {
		return s.write(s.chunk(d, nil))
	}
	s.buf = append(b, s.tail...)
	_, err := s.w.Write(s.buf)
	s.buf = oaiwire.KeepBuffer(s.buf)
	return err
}

// frame is what surrounds a delta in its event: the chunk's fields before
// it, and those after, as Marshal writes a chunkJSON from s.chunk.
func (s *streamSink) frame() (head, tail []byte) {
	head = oaiwire.AppendString([]byte(`data: {"id":`), s.id)
	head = strconv.AppendInt(append(head, `,"object":"chat.completion.chunk","created":`...), s.created, 10)
	head = oaiwire.AppendString(append(head, `,"model":`...), s.model)
	head = append(head, `,"choices":[{"index":0,"delta":`...)
	tail = []byte(`,"logprobs":null,"finish_reason":null}]`)
	if s.includeUsage {
		tail = append(tail, `,"usage":null`...)
	}
	return head, append(tail, "}\n\n"...)
}

// flush pushes what was written to the client. A writer that cannot flush
// already writes through — in Lambda, lambdaurl's writes straight into the
// response stream's pipe — so http.ErrNotSupported is not a lost client.
func (s *streamSink) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (s *streamSink) delta(d oaiwire.Delta) error {
	if d.Empty() {
		return nil
	}
	s.start()
	if !s.roleSent {
		s.roleSent = true
		if err := s.writeDelta(oaiwire.Delta{Role: "assistant"}); err != nil {
			return err
		}
	}
	if len(d.ToolCalls) > 0 {
		s.sawToolCalls = true
	}
	d.Role = ""
	s.tokensSent = true
	return s.writeDelta(d)
}

func (s *streamSink) push() error {
	if !s.headersSent {
		return nil
	}
	return s.flush()
}

func (s *streamSink) finish(reason string, usage oaiwire.Usage) error {
	s.start()
	if !s.roleSent {
		s.roleSent = true
		if err := s.event(s.chunk(oaiwire.Delta{Role: "assistant"}, nil)); err != nil {
			return nil // the client is gone; the job is settled already
		}
	}
	if s.sawToolCalls && reason == oaiwire.FinishStop {
		reason = oaiwire.FinishToolCalls
	}
	if err := s.event(s.chunk(oaiwire.Delta{}, &reason)); err != nil {
		return nil
	}
	if s.includeUsage {
		usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
		final := chunkJSON{ID: s.id, Object: "chat.completion.chunk", Created: s.created, Model: s.model,
			Choices: []oaiwire.ChunkChoice{}, Usage: usage}
		if err := s.event(final); err != nil {
			return nil
		}
	}
	_, _ = s.w.Write([]byte("data: [DONE]\n\n"))
	_ = s.flush()
	return nil
}

func (s *streamSink) fail(err error) error {
	if !s.headersSent {
		return err
	}
	var e *oaiwire.Error
	if !errors.As(err, &e) {
		e = oaiwire.ErrInternal
	}
	s.rm.answered(e)
	_, _ = s.w.Write(append(append([]byte("data: "), e.JSON()...), '\n', '\n'))
	_ = s.flush()
	return nil
}

func (s *streamSink) committed() bool { return s.tokensSent }
func (s *streamSink) reset()          {}

// bufferSink collects the reply for a non-streamed response.
type bufferSink struct {
	w         http.ResponseWriter
	id, model string
	created   int64
	content   strings.Builder
	reasoning strings.Builder
	calls     map[int]*oaiwire.ToolCall
}

func newBufferSink(w http.ResponseWriter, id, model string, created time.Time) *bufferSink {
	return &bufferSink{w: w, id: id, model: model, created: created.Unix(), calls: map[int]*oaiwire.ToolCall{}}
}

func (b *bufferSink) keepAlive() {}

func (b *bufferSink) delta(d oaiwire.Delta) error {
	b.content.WriteString(d.Content)
	b.reasoning.WriteString(d.Reasoning)
	for _, tc := range d.ToolCalls {
		i := 0
		if tc.Index != nil {
			i = *tc.Index
		}
		call, ok := b.calls[i]
		if !ok {
			call = &oaiwire.ToolCall{Type: "function"}
			b.calls[i] = call
		}
		if tc.ID != "" {
			call.ID = tc.ID
		}
		if tc.Function.Name != "" {
			call.Function.Name = tc.Function.Name
		}
		call.Function.Arguments += tc.Function.Arguments
	}
	return nil
}

func (b *bufferSink) finish(reason string, usage oaiwire.Usage) error {
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	msg := oaiwire.ResponseMessage{Role: "assistant", Reasoning: b.reasoning.String()}
	if text := b.content.String(); text != "" || len(b.calls) == 0 {
		msg.Content = &text
	}
	idx := make([]int, 0, len(b.calls))
	for i := range b.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		msg.ToolCalls = append(msg.ToolCalls, *b.calls[i])
	}
	if len(msg.ToolCalls) > 0 && reason == oaiwire.FinishStop {
		reason = oaiwire.FinishToolCalls
	}
	return writeJSON(b.w, http.StatusOK, oaiwire.Completion{ID: b.id, Object: "chat.completion", Created: b.created,
		Model: b.model, Choices: []oaiwire.Choice{{Index: 0, Message: msg, FinishReason: reason}}, Usage: usage})
}

func (b *bufferSink) push() error          { return nil }
func (b *bufferSink) fail(err error) error { return err }
func (b *bufferSink) committed() bool      { return false }

func (b *bufferSink) reset() {
	b.content.Reset()
	b.reasoning.Reset()
	clear(b.calls)
}
