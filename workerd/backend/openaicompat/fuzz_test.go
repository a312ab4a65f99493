package openaicompat

import (
	"bytes"
	"context"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// FuzzSSE feeds arbitrary bytes to the event stream decoder: it must never
// panic, never emit an empty delta, give every tool call fragment an
// index, and end with a valid result or an error.
// Seeds: testdata/fuzz/FuzzSSE (the scripted streams).
func FuzzSSE(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &decoder{}
		var deltas []oaiwire.Delta
		res, err := d.stream(context.Background(), bytes.NewReader(data), 1024, func(dl oaiwire.Delta) error {
			deltas = append(deltas, dl)
			return nil
		})
		calls := false
		for _, dl := range deltas {
			if dl.Empty() {
				t.Fatal("empty delta emitted")
			}
			for _, tc := range dl.ToolCalls {
				if tc.Index == nil || *tc.Index < 0 {
					t.Fatalf("tool call fragment without a valid index: %+v", tc)
				}
				calls = true
			}
		}
		if err != nil {
			if res != (backend.Result{}) {
				t.Fatalf("error %v with result %+v", err, res)
			}
			return
		}
		switch res.FinishReason {
		case oaiwire.FinishStop, oaiwire.FinishLength:
			if calls && res.FinishReason == oaiwire.FinishStop {
				t.Fatal("tool calls emitted, finish stop")
			}
		case oaiwire.FinishToolCalls:
		default:
			t.Fatalf("finish %q", res.FinishReason)
		}
	})
}
