package api

import (
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
