package dynamo_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestRingCompleteCrashAtEveryWrite is TestCrashAtEveryWrite for a ring
// job's completion: its earning split between the coordinator's account
// and two stages of another, with a zero share. Crashed at each write
// (before it, or after it with the reply lost) and retried from a fresh
// process, the table must end exactly as after one clean run: every share
// credited once, with its one ledger entry.
func TestRingCompleteCrashAtEveryWrite(t *testing.T) {
	c := dynamotest.Client(t)
	clock := dynamo.WithClock(func() time.Time { return t0 })
	complete := func(s store.Store) error {
		return s.Complete(bg, store.Completion{JobID: "running", Worker: "w1", PromptTokens: 5,
			CompletionTokens: 20, MilliTokPerSec: 40_000, Earning: 7, At: t0.Add(time.Second),
			Shares: []store.Share{{Account: "wa", Pubkey: "pk1", Amount: 2}, {Account: "wb", Pubkey: "pkb1", Amount: 4},
				{Account: "wb", Pubkey: "pkb2", Amount: 1}, {Account: "wb", Pubkey: "pkb3", Amount: 0}}})
	}
	setup := func(t *testing.T) string {
		t.Helper()
		table := dynamotest.Table(t, c)
		s := dynamo.New(c, table, clock)
		seed(t, s)
		if err := s.CreateAccount(bg, store.Account{ID: "wb", CreatedAt: t0}); err != nil {
			t.Fatalf("CreateAccount wb: %v", err)
		}
		return table
	}
	table := setup(t)
	counter := &crashing{Client: c}
	if err := complete(dynamo.New(counter, table, clock)); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	want := snapshot(t, c, table)
	s := dynamo.New(c, table, clock)
	for account, earned := range map[string]int64{"wa": 2, "wb": 5} {
		if a, err := s.GetAccount(bg, account); err != nil || a.Earned != earned {
			t.Fatalf("clean run: %s = %+v, %v; want earned %d", account, a, err, earned)
		}
	}
	writes := counter.writes.Load()
	if writes == 0 {
		t.Fatal("the completion wrote nothing")
	}
	for at := int64(1); at <= writes; at++ {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("write%d/after=%v", at, after), func(t *testing.T) {
				table := setup(t)
				err := complete(dynamo.New(&crashing{Client: c, at: at, after: after}, table, clock))
				if !errors.Is(err, errCrash) {
					t.Fatalf("crashed run returned %v, want the crash", err)
				}
				if err := complete(dynamo.New(c, table, clock)); err != nil {
					t.Fatalf("retry: %v", err)
				}
				if got := snapshot(t, c, table); !slices.Equal(got, want) {
					t.Errorf("after crash and retry the table differs from one clean run:\n got  %v\n want %v", got, want)
				}
			})
		}
	}
}
