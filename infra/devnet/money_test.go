package devnet_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
)

// TestConcurrentDebits: 200 concurrent requests against a balance that pays
// for exactly 10 → exactly 10 served, 190 refused with 402, balance exactly
// 0, and nothing refunded (every admitted job completed).
func TestConcurrentDebits(t *testing.T) {
	e := newEnv(t, envOptions{credits: 100})
	e.ollamaWorker()
	ctx := context.Background()
	var served, refused, other atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			_, err := e.client.Chat.Completions.New(ctx, chatParams("hello", 4))
			var apiErr *openai.Error
			switch {
			case err == nil:
				served.Add(1)
			case errors.As(err, &apiErr) && apiErr.StatusCode == 402:
				refused.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected: %v", err)
			}
		})
	}
	wg.Wait()
	if served.Load() != 10 || refused.Load() != 190 || other.Load() != 0 {
		t.Errorf("served %d, refused %d, other %d; want 10, 190, 0", served.Load(), refused.Load(), other.Load())
	}
	a := e.balance()
	if a.Credits != 0 || a.TotalSpent != 100 {
		t.Errorf("credits %d spent %d; want 0 and 100", a.Credits, a.TotalSpent)
	}
	st, err := e.store.Stats(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st.JobsCompleted != 10 {
		t.Errorf("jobs completed %d", st.JobsCompleted)
	}
}
