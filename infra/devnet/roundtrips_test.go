package devnet_test

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// queueWatch is the store with a count of finished QueuedJobs calls. The
// dispatch the API runs after a completion reads the queue and, finding it
// empty, ends there: a new count means that background work is over.
type queueWatch struct {
	store.Store
	reads atomic.Int64
}

// AdmitAssign passes the store's own through (dispatch.AdmitAssigner).
func (q *queueWatch) AdmitAssign(ctx context.Context, r store.AdmitRequest, worker string) (store.Admission, bool, error) {
	return q.Store.(*dynamo.Store).AdmitAssign(ctx, r, worker)
}

func (q *queueWatch) QueuedJobs(ctx context.Context, model string, limit int) ([]store.Job, error) {
	defer q.reads.Add(1)
	return q.Store.QueuedJobs(ctx, model, limit)
}

// TestHotPathRoundTrips counts the DynamoDB calls one chat request makes
// once the gateway is warm (the key and the idle worker seen before), on a
// real DynamoDB Local. The hot path is two writes: the admission with the
// worker's claim (AdmitAssign, the worker idle) and Complete. Beside them, the account is read once for the reply's
// x-balance-remaining while the job is dispatched; after the reply, the API
// looks for queued jobs the freed worker could take. Both run off the
// request's path, and are counted separately. Each request's count is taken once that background
// dispatch has finished, and two warm requests are counted so that a call
// landing after one request's count would show in the next.
func TestHotPathRoundTrips(t *testing.T) {
	c := dynamotest.Client(t)
	counting := dynamotest.NewCounting(c)
	st := &queueWatch{Store: dynamo.New(counting, dynamotest.Table(t, c))}
	e := newEnv(t, envOptions{credits: 1000, store: st})
	e.ollamaWorker()
	ctx := context.Background()

	request := func() {
		t.Helper()
		reads := st.reads.Load()
		stream := e.client.Chat.Completions.NewStreaming(ctx, chatParams("hello world", 8))
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		waitFor(t, "the dispatch after the completion", func() bool { return st.reads.Load() > reads })
	}
	request() // warm: the key and the idle worker are now known
	counting.Take()

	hot := map[string]int{"TransactWriteItems": 2}
	// Beside the path: the account's balance for x-balance-remaining
	// (read while the job is dispatched); after it, the worker's models
	// and its queue shards.
	background := map[string]int{"Query table": 1, "GetItem WORKER": 1, "Query index": 4}
	want := maps.Clone(hot)
	maps.Copy(want, background)
	// Two warm requests in a row must count exactly that. On a loaded
	// machine a background dispatch can still overlap the next request:
	// that is off the request's path, but lands in its count, so a pair
	// is tried again, up to five times; every try is logged.
	for try := 1; ; try++ {
		exact := true
		for i := range 2 {
			request()
			if got := counting.Take(); !maps.Equal(got, want) {
				exact = false
				t.Logf("try %d, warm request %d: calls %v (%v), want hot path %v plus background %v",
					try, i+1, got, slices.Sorted(maps.Keys(got)), hot, background)
			}
		}
		if exact {
			return
		}
		if try == 5 {
			t.Fatalf("no pair of warm requests in %d made exactly the hot path's calls (see the log)", try)
		}
	}
}
