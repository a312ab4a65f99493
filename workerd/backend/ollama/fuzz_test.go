package ollama

import (
	"bytes"
	"context"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// FuzzNDJSON feeds arbitrary bytes to the stream decoder as an Ollama
// chat stream: it must never panic, never emit an empty delta, keep the
// tool call delta contract, and end with a valid result or an error.
// Seeds: testdata/fuzz/FuzzNDJSON (the scripted streams).
func FuzzNDJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		d := &decoder{newID: callID}
		var deltas []oaiwire.Delta
		res, err := d.stream(context.Background(), bytes.NewReader(data), 1024, func(dl oaiwire.Delta) error {
			deltas = append(deltas, dl)
			return nil
		})
		calls := 0
		for _, dl := range deltas {
			if dl.Empty() {
				t.Fatal("empty delta emitted")
			}
			for _, tc := range dl.ToolCalls {
				if tc.Index == nil || *tc.Index != calls || tc.ID == "" || tc.Type != "function" {
					t.Fatalf("tool call delta %+v", tc)
				}
				calls++
			}
		}
		if err != nil {
			if res != (backend.Result{}) {
				t.Fatalf("error %v with result %+v", err, res)
			}
			return
		}
		want := oaiwire.FinishStop
		if calls > 0 {
			want = oaiwire.FinishToolCalls
		}
		if res.FinishReason != want && !(calls == 0 && res.FinishReason == oaiwire.FinishLength) {
			t.Fatalf("finish %q with %d calls", res.FinishReason, calls)
		}
		if u := res.Usage; u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			t.Fatalf("usage %+v", u)
		}
	})
}
