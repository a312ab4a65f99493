package dynamo_test

import (
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestEarningsFromCompletions: earnings credited by Complete land in
// shards that OwedEarnings finds through the index and sums.
func TestEarningsFromCompletions(t *testing.T) {
	c := dynamotest.Client(t)
	s := dynamo.New(c, dynamotest.Table(t, c))
	seed(t, s)
	if err := s.Complete(bg, store.Completion{JobID: "running", Worker: "w1", Earning: 7, At: t0}); err != nil {
		t.Fatal(err)
	}
	adm, err := s.Admit(bg, req("second"))
	if err != nil {
		t.Fatal(err)
	}
	j := adm.Job
	if _, err := s.Assign(bg, j.ID, "w2", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(bg, store.Completion{JobID: j.ID, Worker: "w2", Earning: 6, At: t0}); err != nil {
		t.Fatal(err)
	}
	owed, err := s.OwedEarnings(bg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := []store.Owed{{AccountID: "wa", Credits: 13}}; !slices.Equal(owed, want) {
		t.Fatalf("owed %v, want %v", owed, want)
	}
	if _, err := s.AdjustPaidOut(bg, "wa", 13, "payouts/x/wa"); err != nil {
		t.Fatal(err)
	}
	if owed, _ := s.OwedEarnings(bg, 1); len(owed) != 0 {
		t.Fatalf("owed after paying everything: %v", owed)
	}
}
