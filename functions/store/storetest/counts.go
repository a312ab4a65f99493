package storetest

import (
	"fmt"
	"maps"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
)

// counts is what Stats reports of workers and the queue.
type counts struct {
	online  int64
	workers map[string]int64
	queue   map[string]int64
}

func (c counts) String() string {
	return fmt.Sprintf("online %d, workers %v, queue %v", c.online, c.workers, c.queue)
}

func (c counts) equal(o counts) bool {
	return c.online == o.online && maps.Equal(c.workers, o.workers) && maps.Equal(c.queue, o.queue)
}

// statCounts reads the counts from Stats.
func (f *fixture) statCounts() counts {
	f.t.Helper()
	st, err := f.s.Stats(f.ctx, base)
	if err != nil {
		f.t.Fatalf("Stats: %v", err)
	}
	return counts{online: st.WorkersOnline, workers: st.WorkersByModel, queue: st.QueueByModel}
}

// wantCounts fails unless Stats reports want.
func (f *fixture) wantCounts(what string, want counts) {
	f.t.Helper()
	if want.workers == nil {
		want.workers = map[string]int64{}
	}
	if want.queue == nil {
		want.queue = map[string]int64{}
	}
	if got := f.statCounts(); !got.equal(want) {
		f.t.Errorf("%s: Stats %v, want %v", what, got, want)
	}
}

// trueCounts counts the records themselves: the connected workers, the
// registered ones by each model they serve, and the queued jobs among jobs.
func (f *fixture) trueCounts(jobs []string) counts {
	f.t.Helper()
	ws, err := f.s.Workers(f.ctx)
	if err != nil {
		f.t.Fatalf("Workers: %v", err)
	}
	c := counts{online: int64(len(ws)), workers: map[string]int64{}, queue: map[string]int64{}}
	for _, w := range ws {
		if !w.Registered {
			continue
		}
		seen := map[string]bool{}
		for _, m := range w.Models {
			if !seen[m] {
				seen[m] = true
				c.workers[m]++
			}
		}
	}
	for _, id := range jobs {
		if j := f.getJob(id); j.State == store.JobQueued {
			c.queue[j.Model]++
		}
	}
	return c
}

// The counts behind Stats change with every transition of the state they
// count, and with nothing else.
var countTests = []test{
	{"CountsFollowTransitions", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1000, 0)
		f.account("wa", 0, 0)
		f.wantCounts("empty", counts{})

		f.putWorker("w1", "wa")
		f.wantCounts("connected, not registered", counts{online: 1})
		if _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1", "m2"}, nil); err != nil {
			t.Fatalf("RegisterWorker: %v", err)
		}
		f.wantCounts("registered", counts{online: 1, workers: map[string]int64{"m1": 1, "m2": 1}})
		// A registration replaces the one before; a model named twice
		// counts once.
		if _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m2", "m3", "m3"}, nil); err != nil {
			t.Fatalf("RegisterWorker again: %v", err)
		}
		f.wantCounts("registered again", counts{online: 1, workers: map[string]int64{"m2": 1, "m3": 1}})
		f.worker("w2", "wa", "m1", "m3")
		want := counts{online: 2, workers: map[string]int64{"m1": 1, "m2": 1, "m3": 2}}
		f.wantCounts("two workers", want)
		if _, err := f.s.DrainWorker(f.ctx, "w2"); err != nil {
			t.Fatalf("DrainWorker: %v", err)
		}
		f.wantCounts("draining counts until it goes", want)

		// Queue: admitted in, assigned out, requeued in, failed out.
		f.admit(key, "j1", "m3", 1, at(1))
		f.admit(key, "j2", "m3", 1, at(2))
		f.admit(key, "j3", "m2", 1, at(3))
		want.queue = map[string]int64{"m3": 2, "m2": 1}
		f.wantCounts("admitted", want)
		f.assign("j1", "w1", at(4))
		want.queue = map[string]int64{"m3": 1, "m2": 1}
		f.wantCounts("assigned", want)
		if _, err := f.s.Requeue(f.ctx, "j1", "w1", at(5)); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		want.queue = map[string]int64{"m3": 2, "m2": 1}
		f.wantCounts("requeued", want)
		f.assign("j1", "w1", at(6))
		if err := f.s.Complete(f.ctx, completion("j1", "w1", at(7))); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		want.queue = map[string]int64{"m3": 1, "m2": 1}
		f.wantCounts("completed", want)
		for range 2 { // failing twice (the second time with a refund) counts once
			if _, err := f.s.Fail(f.ctx, "j2", "queue_timeout", true, at(8)); err != nil {
				t.Fatalf("Fail: %v", err)
			}
		}
		want.queue = map[string]int64{"m2": 1}
		f.wantCounts("failed while queued", want)
		f.assign("j3", "w1", at(9))
		if _, err := f.s.Fail(f.ctx, "j3", "worker_error", true, at(10)); err != nil {
			t.Fatalf("Fail assigned: %v", err)
		}
		want.queue = nil
		f.wantCounts("failed while assigned", want)

		// Disconnects, the unregistered worker's too.
		if _, err := f.s.DeleteWorker(f.ctx, "w2"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		want = counts{online: 1, workers: map[string]int64{"m2": 1, "m3": 1}}
		f.wantCounts("one disconnected", want)
		_, err := f.s.DeleteWorker(f.ctx, "w2")
		wantErr(t, "DeleteWorker again", err, store.ErrNotFound)
		f.wantCounts("a second disconnect changes nothing", want)
		f.putWorker("w3", "wa")
		for _, conn := range []string{"w1", "w3"} {
			if _, err := f.s.DeleteWorker(f.ctx, conn); err != nil {
				t.Fatalf("DeleteWorker %s: %v", conn, err)
			}
		}
		f.wantCounts("all gone", counts{})
	}},
	{"RecentModels", func(t *testing.T, f *fixture) {
		// A model is recent from its first registered worker on, and
		// stays so after the worker leaves; one never served is not.
		recent := func(what string, want ...string) {
			t.Helper()
			st, err := f.s.Stats(f.ctx, base)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			got := map[string]bool{}
			for m, ok := range st.RecentModels {
				if ok {
					got[m] = true
				}
			}
			wantSet := map[string]bool{}
			for _, m := range want {
				wantSet[m] = true
			}
			if !maps.Equal(got, wantSet) {
				t.Errorf("%s: recent models %v, want %v", what, got, wantSet)
			}
		}
		recent("empty store")
		f.putWorker("w1", "wa")
		recent("a worker connected, not registered")
		if _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1", "m2"}, nil); err != nil {
			t.Fatal(err)
		}
		recent("registered", "m1", "m2")
		if _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m2"}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatal(err)
		}
		f.wantCounts("after the worker left", counts{})
		recent("after the worker left", "m1", "m2")
	}},
	{"ConcurrentTransitionsCountExactly", func(t *testing.T, f *fixture) {
		models := [][]string{{"m1"}, {"m1", "m2"}, {"m2", "m3"}}
		// Workers connect and register at once, on three tokens (each
		// well under its cap).
		const nw = 12
		for i := range 3 {
			f.account(fmt.Sprintf("wa%d", i), 0, 0)
		}
		conn := func(i int) string { return fmt.Sprintf("w%02d", i) }
		_, by := tally(t, race(nw, func(i int) error {
			w := store.Worker{Conn: conn(i), AccountID: fmt.Sprintf("wa%d", i%3), TokenHash: fmt.Sprintf("tokenhash-wa%d", i%3),
				Pubkey: "pubkey-" + conn(i), State: store.WorkerIdle, ConnectedAt: base}
			if err := f.s.PutWorker(f.ctx, w); err != nil {
				return err
			}
			_, err := f.s.RegisterWorker(f.ctx, conn(i), models[i%3], nil)
			return err
		}))
		if len(by) != 0 {
			t.Fatalf("connects failed: %v", by)
		}
		f.wantCounts("after concurrent connects", f.trueCounts(nil))

		// The same workers re-register and disconnect at once: two
		// transitions race on each.
		tally(t, race(2*nw, func(k int) error {
			i := k % nw
			switch {
			case k < nw:
				_, err := f.s.RegisterWorker(f.ctx, conn(i), models[(i+1)%3], nil)
				return err
			case i%2 == 0:
				_, err := f.s.DeleteWorker(f.ctx, conn(i))
				return err
			default:
				_, err := f.s.RegisterWorker(f.ctx, conn(i), models[(i+2)%3], nil)
				return err
			}
		}), store.ErrNotFound, store.ErrConflict)
		f.wantCounts("after racing registrations and disconnects", f.trueCounts(nil))

		// Jobs: admitted at once by three payers, then assigned, failed
		// and assigned again at once, two transitions racing on each.
		keys := []string{f.payer("p0", 1000, 0), f.payer("p1", 1000, 0), f.payer("p2", 1000, 0)}
		const nj = 12
		job := func(i int) string { return fmt.Sprintf("job%02d", i) }
		var ids []string
		for i := range nj {
			ids = append(ids, job(i))
		}
		ok, _ := tally(t, race(nj, func(i int) error {
			_, err := f.s.Admit(f.ctx, request(keys[i%3], job(i), models[1][i%2], 1, at(i)))
			return err
		}))
		if ok != nj {
			t.Fatalf("%d of %d jobs admitted", ok, nj)
		}
		f.wantCounts("after concurrent admissions", f.trueCounts(ids))
		for i := range 4 {
			f.worker(fmt.Sprintf("jw%d", i), "wa0", "m1", "m2")
		}
		tally(t, race(2*nj, func(k int) error {
			i := k % nj
			switch {
			case k < nj:
				_, err := f.s.Assign(f.ctx, job(i), fmt.Sprintf("jw%d", i%4), at(100))
				return err
			case i%2 == 0:
				_, err := f.s.Fail(f.ctx, job(i), "queue_timeout", true, at(100))
				return err
			default:
				_, err := f.s.Assign(f.ctx, job(i), fmt.Sprintf("jw%d", (i+1)%4), at(100))
				return err
			}
		}), store.ErrConflict, store.ErrNotFound)
		f.wantCounts("after racing assignments and failures", f.trueCounts(ids))

		// Each assigned job is requeued and failed at once.
		var assigned []store.Job
		for _, id := range ids {
			if j := f.getJob(id); j.State == store.JobAssigned {
				assigned = append(assigned, j)
			}
		}
		tally(t, race(2*len(assigned), func(k int) error {
			j := assigned[k%len(assigned)]
			if k < len(assigned) {
				_, err := f.s.Requeue(f.ctx, j.ID, j.Worker, at(200))
				return err
			}
			_, err := f.s.Fail(f.ctx, j.ID, "worker_lost", true, at(200))
			return err
		}), store.ErrConflict)
		f.wantCounts("after racing requeues and failures", f.trueCounts(ids))
	}},
}
