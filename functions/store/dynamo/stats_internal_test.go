package dynamo

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A registration that swaps maxModels models for as many others stays
// within DynamoDB's 4 KB limit on an update expression, and every clause
// names its own attribute.
func TestCountAddsFitsTheExpressionLimit(t *testing.T) {
	deltas := map[string]int64{}
	for i := range maxModels {
		deltas[fmt.Sprintf("old-model-with-a-long-name-%03d", i)] = -1
		deltas[fmt.Sprintf("new-model-with-a-long-name-%03d", i)] = 1
	}
	item := (&Store{table: "t"}).onlineCountItem("conn", 1_900_000_000, -1, deltas)
	expr := *item.Update.UpdateExpression
	if len(expr) > 4096 {
		t.Errorf("update expression of %d bytes, DynamoDB takes at most 4096", len(expr))
	}
	if got, want := strings.Count(expr, ":"), 2*maxModels+2; got != want {
		t.Errorf("%d values in %q, want %d", got, expr, want)
	}
	if got := len(item.Update.ExpressionAttributeNames); got != 2*maxModels+2 {
		t.Errorf("%d names, want %d", got, 2*maxModels+2)
	}
}

// The buckets Stats reads: from the one now is in to that of a record
// written now, four for a three-hour TTL.
func TestLiveBuckets(t *testing.T) {
	now := time.Date(2031, 3, 14, 12, 59, 59, 0, time.UTC)
	got := liveBuckets(now)
	if len(got) != 4 {
		t.Fatalf("%d buckets, want 4: %v", len(got), got)
	}
	if first := time.Unix(got[0], 0).UTC(); !first.Equal(time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("first bucket %v, want 12:00", first)
	}
	if last := bucketOf(ttl(now.Add(connectionTTL))); got[3] != last {
		t.Errorf("last bucket %d, want that of a record written now, %d", got[3], last)
	}
}
