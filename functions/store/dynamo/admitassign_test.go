package dynamo_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestAdmitAssignIsAdmitThenAssign: from the same state, AdmitAssign leaves
// the table exactly as Admit followed by Assign does when the worker can
// take the job (in one transaction), exactly as Admit alone when it cannot
// (the worker busy, unknown, draining or not serving the model: the job
// waits queued), learns a stale hint as Admit does, and answers a refused admission with Admit's error, writing
// nothing. Two tables seeded alike, one driven each way, are compared item
// by item.
func TestAdmitAssignIsAdmitThenAssign(t *testing.T) {
	c := dynamotest.Client(t)
	clock := dynamo.WithClock(func() time.Time { return t0 })
	expensive := req("new")
	expensive.Job.Price = 1000
	limited := req("new")
	limited.Limit = 2 // the key made two requests in the window: queued and running
	both := func(f func(s *dynamo.Store) error) func(t *testing.T, ref, got *dynamo.Store, tables []string) {
		return func(t *testing.T, ref, got *dynamo.Store, _ []string) {
			t.Helper()
			for _, s := range []*dynamo.Store{ref, got} {
				if err := f(s); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	one, keyAndOne := map[string]int{"TransactWriteItems": 1}, map[string]int{"GetItem KEY": 1, "TransactWriteItems": 1}
	for _, tc := range []struct {
		name   string
		r      store.AdmitRequest
		worker string
		// setup runs after the seed, on both tables, through the stores
		// under test (so their hints are what those calls left).
		setup    func(t *testing.T, ref, got *dynamo.Store, tables []string)
		assigned bool
		err      error
		// calls are AdmitAssign's round trips: a read of the key when
		// the request does not name the account (the API names it),
		// then the transactions.
		calls map[string]int
	}{
		{name: "idle worker", r: req("new"), worker: "w2", assigned: true, calls: keyAndOne},
		{name: "idle worker, account named", r: limitedReq("new"), worker: "w2", assigned: true, calls: one},
		{name: "worker busy", r: req("new"), worker: "w1", calls: map[string]int{"GetItem KEY": 1, "TransactWriteItems": 2}},
		{name: "worker unknown", r: req("new"), worker: "w9", calls: keyAndOne},
		{name: "worker draining", r: limitedReq("new"), worker: "w2", calls: map[string]int{"TransactWriteItems": 2},
			setup: both(func(s *dynamo.Store) error { _, err := s.DrainWorker(bg, "w2"); return err })},
		{name: "worker serves another model", r: limitedReq("new"), worker: "w2", calls: map[string]int{"TransactWriteItems": 2},
			setup: both(func(s *dynamo.Store) error { _, err := s.RegisterWorker(bg, "w2", []string{"m2"}, nil); return err })},
		{name: "allowance hint stale", r: limitedReq("new"), worker: "w2", assigned: true, calls: map[string]int{"TransactWriteItems": 2},
			setup: func(t *testing.T, _, _ *dynamo.Store, tables []string) {
				// Another process grants the day's allowance: this one's
				// hint (none left) is stale, the claim is not.
				for _, table := range tables {
					if _, err := dynamo.New(c, table, clock).SetDailyAllowance(bg, "a", "2031-03-14", 9); err != nil {
						t.Fatal(err)
					}
				}
			}},
		{name: "rate limited", r: limited, worker: "w2", err: store.ErrRateLimited, calls: keyAndOne},
		{name: "not enough credits", r: expensive, worker: "w2", err: store.ErrInsufficientCredits, calls: keyAndOne},
		{name: "job id taken", r: req("queued"), worker: "w2", err: store.ErrExists, calls: keyAndOne},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refTable, gotTable := dynamotest.Table(t, c), dynamotest.Table(t, c)
			counting := dynamotest.NewCounting(c)
			ref, got := dynamo.New(c, refTable, clock), dynamo.New(counting, gotTable, clock)
			seed(t, ref)
			seed(t, got)
			if tc.setup != nil {
				tc.setup(t, ref, got, []string{refTable, gotTable})
			}
			before := snapshot(t, c, gotTable)

			counting.Take()
			adm, assigned, err := got.AdmitAssign(bg, tc.r, tc.worker)
			if !errors.Is(err, tc.err) || assigned != tc.assigned {
				t.Fatalf("AdmitAssign: assigned %v, err %v; want %v, %v", assigned, err, tc.assigned, tc.err)
			}
			if calls := counting.Take(); !maps.Equal(calls, tc.calls) {
				t.Errorf("calls %v, want %v", calls, tc.calls)
			}
			if tc.err != nil {
				if after := snapshot(t, c, gotTable); !slices.Equal(before, after) {
					t.Fatalf("a refused admission changed the table:\n got  %v\n want %v", after, before)
				}
				return
			}
			want, err := ref.Admit(bg, tc.r)
			if err != nil {
				t.Fatal(err)
			}
			if tc.assigned {
				if want.Job, err = ref.Assign(bg, tc.r.Job.ID, tc.worker, t0); err != nil {
					t.Fatal(err)
				}
			}
			if adm != want {
				t.Errorf("admission\n got %+v\nwant %+v", adm, want)
			}
			if got, want := counted(t, snapshot(t, c, gotTable)), counted(t, snapshot(t, c, refTable)); !slices.Equal(got, want) {
				t.Errorf("tables differ:\n got  %v\n want %v", got, want)
			}
			if j, err := got.GetJob(bg, tc.r.Job.ID); err != nil || j != adm.Job {
				t.Errorf("stored job %+v, %v; want %+v", j, err, adm.Job)
			}
		})
	}
}

// counted drops the queue-count shards that count nothing from a snapshot:
// Admit then Assign add 1 and -1 to the job's shard, creating it at 0 if
// it was missing, where AdmitAssign, which adds neither, leaves it
// missing. Both read as 0.
func counted(t *testing.T, items []string) []string {
	t.Helper()
	return slices.DeleteFunc(items, func(item string) bool {
		var m map[string]any
		if err := json.Unmarshal([]byte(item), &m); err != nil {
			t.Fatal(err)
		}
		if m["sk"] != "QUEUE" {
			return false
		}
		for k, v := range m {
			if strings.HasPrefix(k, "m#") && v != float64(0) {
				return false
			}
		}
		return true
	})
}
