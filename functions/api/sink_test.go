package api

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// TestStreamSinkPushes: the deltas of a chunk are buffered and reach the
// client together at push, in order, after the role event; a push with
// nothing written sends nothing.
func TestStreamSinkPushes(t *testing.T) {
	w := httptest.NewRecorder()
	s := newStreamSink(w, "chatcmpl-x", "m", time.Unix(1, 0), false, nil)
	if err := s.push(); err != nil {
		t.Fatal(err)
	}
	if w.Flushed || w.Body.Len() != 0 {
		t.Fatalf("push before any delta: flushed %v, %d bytes", w.Flushed, w.Body.Len())
	}
	for _, text := range []string{"one", "two", "three"} {
		if err := s.delta(oaiwire.Delta{Content: text}); err != nil {
			t.Fatal(err)
		}
	}
	if w.Flushed {
		t.Fatal("deltas flushed before push: one write each")
	}
	if err := s.push(); err != nil {
		t.Fatal(err)
	}
	if !w.Flushed {
		t.Fatal("push did not flush")
	}
	events := strings.Split(strings.TrimSpace(w.Body.String()), "\n\n")
	want := []string{`"role":"assistant"`, `"content":"one"`, `"content":"two"`, `"content":"three"`}
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %q", len(events), len(want), events)
	}
	for i, e := range events {
		if !strings.HasPrefix(e, "data: {") || !strings.Contains(e, want[i]) {
			t.Errorf("event %d = %q, want one with %s", i, e, want[i])
		}
	}
	if !s.committed() {
		t.Error("not committed after deltas")
	}
}

// TestStreamSinkDeltaBytes: the event writeDelta builds in place is, byte
// for byte, the one Marshal writes for the same chunk (write(s.chunk)), with
// and without usage, for the role, text, reasoning and escapes in the
// text, id and model; a delta with tool calls takes Marshal's path.
func TestStreamSinkDeltaBytes(t *testing.T) {
	i := 0
	deltas := []oaiwire.Delta{
		{Role: "assistant"},
		{Content: "w1 "},
		{Reasoning: "think <b> & \u2028"},
		{Content: "tab\t\"q\" \xff é 🙂", Reasoning: "r"},
		{Content: "call", ToolCalls: []oaiwire.ToolCall{{Index: &i, ID: "c1", Type: "function",
			Function: oaiwire.FunctionCall{Name: "f", Arguments: `{"a":1}`}}}},
	}
	for _, usage := range []bool{false, true} {
		for _, names := range [][2]string{{"chatcmpl-x", "m"}, {`chatcmpl-<"&>`, "org/model:q4 \u2029"}} {
			built, marshalled := httptest.NewRecorder(), httptest.NewRecorder()
			a := newStreamSink(built, names[0], names[1], time.Unix(1700000000, 0), usage, nil)
			b := newStreamSink(marshalled, names[0], names[1], time.Unix(1700000000, 0), usage, nil)
			for _, d := range deltas {
				if err := a.writeDelta(d); err != nil {
					t.Fatal(err)
				}
				if err := b.write(b.chunk(d, nil)); err != nil {
					t.Fatal(err)
				}
				if got, want := built.Body.String(), marshalled.Body.String(); got != want {
					t.Fatalf("usage %v, names %q, delta %+v:\n got %s\nwant %s", usage, names, d, got, want)
				}
			}
		}
	}
}

// TestStreamSinkDropsBigBuffer: an event grown past MaxKeptBuffer (a
// worker's delta of escaped text) is written whole and its buffer is not
// kept for the rest of the stream; an ordinary one keeps it.
func TestStreamSinkDropsBigBuffer(t *testing.T) {
	w := httptest.NewRecorder()
	s := newStreamSink(w, "chatcmpl-x", "m", time.Unix(1, 0), false, nil)
	big := strings.Repeat("<", oaiwire.MaxKeptBuffer/4) // six bytes each once escaped
	if err := s.writeDelta(oaiwire.Delta{Content: big}); err != nil {
		t.Fatal(err)
	}
	if s.buf != nil {
		t.Errorf("kept a %d-byte buffer after a big event", cap(s.buf))
	}
	if want := strings.Repeat(`\u003c`, len(big)); !strings.Contains(w.Body.String(), want) {
		t.Error("the big event was not written whole")
	}
	if err := s.writeDelta(oaiwire.Delta{Content: "w1 "}); err != nil {
		t.Fatal(err)
	}
	if s.buf == nil {
		t.Error("dropped the buffer of an ordinary event")
	}
}

// BenchmarkStreamSinkDelta is one token's event, plain and with text that
// JSON escapes (code, markdown), built in place against the Marshal path.
func BenchmarkStreamSinkDelta(b *testing.B) {
	for _, text := range []string{" world", "\n\n```go\n", `"<b>" & \t`} {
		for _, path := range []string{"built", "marshalled"} {
			b.Run(fmt.Sprintf("%s/%q", path, text), func(b *testing.B) {
				s := newStreamSink(httptest.NewRecorder(), "chatcmpl-x", "m", time.Unix(1, 0), true, nil)
				d := oaiwire.Delta{Content: text}
				b.ReportAllocs()
				for b.Loop() {
					s.w.(*httptest.ResponseRecorder).Body.Reset()
					var err error
					if path == "built" {
						err = s.writeDelta(d)
					} else {
						err = s.write(s.chunk(d, nil))
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
