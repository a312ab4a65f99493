package devnet_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestHotPathRoundTrips counts the DynamoDB calls one chat request makes
// once the gateway is warm (the key and the idle worker seen before), on a
// real DynamoDB Local. The hot path is three writes: Admit, Assign and
// Complete. After the reply, the API looks for queued jobs the freed worker
// could take; that runs in the background, off the request's path, and is
// counted separately.
func TestHotPathRoundTrips(t *testing.T) {
	c := dynamotest.Client(t)
	counting := dynamotest.NewCounting(c)
	st := dynamo.New(counting, dynamotest.Table(t, c))
	e := newEnv(t, envOptions{credits: 1000, store: st})
	e.ollamaWorker()
	ctx := context.Background()

	request := func() {
		t.Helper()
		stream := e.client.Chat.Completions.NewStreaming(ctx, chatParams("hello world", 8))
		for stream.Next() {
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("stream: %v", err)
		}
		// Let the background dispatch after the completion finish, so
		// its reads are not counted with the next request.
		time.Sleep(300 * time.Millisecond)
	}
	request() // warm: the key and the idle worker are now known
	counting.Take()
	request()
	got := counting.Take()

	hot := map[string]int{"TransactWriteItems": 3}
	background := map[string]int{"GetItem WORKER": 1, "Query index": 4} // the worker's models; its queue shards
	want := maps.Clone(hot)
	maps.Copy(want, background)
	if !maps.Equal(got, want) {
		keys := slices.Sorted(maps.Keys(got))
		t.Errorf("calls per warm chat request: %v (%v), want hot path %v plus background %v", got, keys, hot, background)
	}
}
