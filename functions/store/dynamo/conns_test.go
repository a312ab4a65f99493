package dynamo_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// The conformance suite checks the per-token connection cap as the contract
// states it; these tests check what only this store has to get right: a
// live count kept in an item of its own, next to connection records that
// TTL expires and deletes without telling it.

// connect puts a worker on token "th" and reports the store's error.
func connect(s *dynamo.Store, conn string) error {
	return s.PutWorker(bg, store.Worker{Conn: conn, AccountID: "wa", TokenHash: "th", ConnectedAt: t0})
}

// wantConnect fails the test unless connect returns want.
func wantConnect(t *testing.T, s *dynamo.Store, conn string, want error) {
	t.Helper()
	if err := connect(s, conn); !errors.Is(err, want) && !(want == nil && err == nil) {
		t.Fatalf("PutWorker %s: %v, want %v", conn, err, want)
	}
}

// TestExpiredConnectionsFreeTheirSlots: connections whose $disconnect never
// came (their records expired) stop counting against the cap once it is
// reached, and deleting them later does not count them down twice.
func TestExpiredConnectionsFreeTheirSlots(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	at := func(d time.Duration) *dynamo.Store {
		return dynamo.New(c, table, dynamo.WithMaxConnsPerToken(2),
			dynamo.WithClock(func() time.Time { return t0.Add(d) }))
	}
	now := at(0)
	if err := now.PutWorkerToken(bg, store.Secret{Hash: "th", ID: "t1", AccountID: "wa", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	wantConnect(t, now, "w1", nil)
	wantConnect(t, now, "w2", nil)
	wantConnect(t, now, "w3", store.ErrLimit)

	// Four hours on, w1 and w2 are long gone (API Gateway closes every
	// connection within 2 h) though their records remain.
	later := at(4 * time.Hour)
	wantConnect(t, later, "w3", nil)
	wantConnect(t, later, "w4", nil)
	wantConnect(t, later, "w5", store.ErrLimit)
	// Their late deletes were already left out of the count.
	for _, conn := range []string{"w1", "w2"} {
		if _, err := later.DeleteWorker(bg, conn); err != nil {
			t.Fatalf("DeleteWorker %s: %v", conn, err)
		}
	}
	wantConnect(t, later, "w5", store.ErrLimit)
	if _, err := later.DeleteWorker(bg, "w3"); err != nil {
		t.Fatal(err)
	}
	wantConnect(t, later, "w5", nil)
	wantConnect(t, later, "w6", store.ErrLimit)
}

// TestVanishedConnectionsFreeTheirSlots: TTL deletes expired records on its
// own schedule, each item on its own, without counting them down. A
// disconnect that finds part of its records gone still succeeds, and the
// recount counts what is there.
func TestVanishedConnectionsFreeTheirSlots(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	s := dynamo.New(c, table, dynamo.WithMaxConnsPerToken(2), dynamo.WithClock(func() time.Time { return t0 }))
	wantConnect(t, s, "w1", nil)
	wantConnect(t, s, "w2", nil)
	// Four hours on, TTL has deleted all of w1 and w2's entry under the
	// token, not yet w2's worker record.
	deleteRaw(t, c, table, "WORKER#w1", "WORKER")
	deleteRaw(t, c, table, "TOKEN#th", "CONN#w1")
	deleteRaw(t, c, table, "TOKEN#th", "CONN#w2")
	later := dynamo.New(c, table, dynamo.WithMaxConnsPerToken(2),
		dynamo.WithClock(func() time.Time { return t0.Add(4 * time.Hour) }))
	if _, err := later.DeleteWorker(bg, "w2"); err != nil {
		t.Fatalf("DeleteWorker of a worker whose token entry is gone: %v", err)
	}
	if _, err := later.DeleteWorker(bg, "w1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteWorker of a worker gone entirely: %v, want ErrNotFound", err)
	}
	wantConnect(t, later, "w3", nil)
	wantConnect(t, later, "w4", nil)
	wantConnect(t, later, "w5", store.ErrLimit)
}

// deleteRaw deletes one item behind the store's back, as TTL does.
func deleteRaw(t *testing.T, c *dynamodb.Client, table, pk, sk string) {
	t.Helper()
	_, err := c.DeleteItem(bg, &dynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestResetConnectionsFreesTokenSlots: the dev runner's reset leaves every
// token with no connection counted.
func TestResetConnectionsFreesTokenSlots(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	s := dynamo.New(c, table, dynamo.WithMaxConnsPerToken(2), dynamo.WithClock(func() time.Time { return t0 }))
	wantConnect(t, s, "w1", nil)
	wantConnect(t, s, "w2", nil)
	if err := s.ResetConnections(bg, "gateway_restart", t0); err != nil {
		t.Fatal(err)
	}
	if ws, err := s.Workers(bg); err != nil || len(ws) != 0 {
		t.Fatalf("workers after reset: %v, %v", ws, err)
	}
	if st, err := s.Stats(bg, t0); err != nil || st.WorkersOnline != 0 {
		t.Fatalf("stats after reset: %+v, %v; want no worker online", st, err)
	}
	for i := range 2 {
		wantConnect(t, s, fmt.Sprint("new", i), nil)
	}
	wantConnect(t, s, "new2", store.ErrLimit)
	if st, err := s.Stats(bg, t0); err != nil || st.WorkersOnline != 2 {
		t.Fatalf("stats after reconnecting: %+v, %v; want 2 workers online", st, err)
	}
}

// TestOnlineCountsFollowRecordExpiry: a worker whose $disconnect never
// came stops counting once its record's bucket has passed, as every other
// reader stops seeing it when the record expires; one that disconnects
// after its record expired is counted down all the same.
func TestOnlineCountsFollowRecordExpiry(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	now := t0
	s := dynamo.New(c, table, dynamo.WithClock(func() time.Time { return now }))
	for _, conn := range []string{"lost", "kept"} {
		if err := s.PutWorker(bg, store.Worker{Conn: conn, AccountID: "wa", Pubkey: "pk-" + conn}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RegisterWorker(bg, conn, []string{"m1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		after time.Duration
		want  int64
	}{
		{0, 2},
		{2 * time.Hour, 2}, // API Gateway has closed both by now; their records live on
		{5 * time.Hour, 0}, // past the records' expiry and its bucket
	} {
		now = t0.Add(tc.after)
		st, err := s.Stats(bg, now)
		if err != nil {
			t.Fatal(err)
		}
		if st.WorkersOnline != tc.want || st.WorkersByModel["m1"] != tc.want {
			t.Errorf("%v after connecting: %+v, want %d online", tc.after, st, tc.want)
		}
	}
	// The late disconnect of an expired record leaves the counts as they
	// are (its bucket is no longer read).
	if _, err := s.DeleteWorker(bg, "kept"); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(bg, now); err != nil || st.WorkersOnline != 0 || len(st.WorkersByModel) != 0 {
		t.Errorf("after a late disconnect: %+v, %v", st, err)
	}
	// And a worker connecting now counts from now.
	if err := s.PutWorker(bg, store.Worker{Conn: "new", AccountID: "wa", Pubkey: "pk-new"}); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(bg, now); err != nil || st.WorkersOnline != 1 {
		t.Errorf("after a new connect: %+v, %v", st, err)
	}
}
