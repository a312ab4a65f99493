package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

var assignTests = []test{
	{"Success", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		queued := f.admit(key, "j1", "m1", 10, at(1))
		before := f.worker("w1", "wa", "m0", "m1")
		f.worker("w2", "wa", "m1")
		got := f.assign("j1", "w1", at(50))
		want := queued
		want.State, want.Worker, want.WorkerAccount, want.Attempts, want.Updated = store.JobAssigned, "w1", "wa", 1, at(50)
		want.WorkerPubkey = before.Pubkey
		sameJob(t, "Assign result", got, want)
		sameJob(t, "GetJob", f.getJob("j1"), want)
		wantWorker := before
		wantWorker.State, wantWorker.Job = store.WorkerBusy, "j1"
		sameWorker(t, "worker", f.getWorker("w1"), wantWorker)
		if q := f.queued("m1"); len(q) != 0 {
			t.Errorf("queue %v, want empty", q)
		}
		idle, err := f.s.IdleWorkers(f.ctx, "m1")
		if err != nil {
			t.Fatalf("IdleWorkers: %v", err)
		}
		if got := conns(idle); !slices.Equal(got, []string{"w2"}) {
			t.Errorf("idle %v, want [w2]", got)
		}
	}},
	{"Conflict", func(t *testing.T, f *fixture) {
		f.account("wa", 0, 0)
		for _, tc := range []struct {
			name string
			// setup returns the job and worker Assign is tried on.
			setup func(f *fixture, p, key string) (job, worker string)
		}{
			{"JobAssigned", func(f *fixture, p, key string) (string, string) {
				f.worker(p+"w0", "wa", "m1")
				f.assign(p+"j", p+"w0", at(5))
				return p + "j", p + "w"
			}},
			{"JobFailed", func(f *fixture, p, key string) (string, string) {
				if _, err := f.s.Fail(f.ctx, p+"j", "client_gone", false, at(5)); err != nil {
					f.t.Fatalf("Fail: %v", err)
				}
				return p + "j", p + "w"
			}},
			{"JobDone", func(f *fixture, p, key string) (string, string) {
				f.worker(p+"w0", "wa", "m1")
				f.assign(p+"j", p+"w0", at(5))
				f.complete(p+"j", p+"w0", at(6))
				return p + "j", p + "w"
			}},
			{"WorkerBusy", func(f *fixture, p, key string) (string, string) {
				f.admit(key, p+"other", "m1", 1, at(1))
				f.assign(p+"other", p+"w", at(5))
				return p + "j", p + "w"
			}},
			{"WorkerNotRegistered", func(f *fixture, p, key string) (string, string) {
				f.putWorker(p+"unreg", "wa")
				return p + "j", p + "unreg"
			}},
			{"WorkerDraining", func(f *fixture, p, key string) (string, string) {
				if _, err := f.s.DrainWorker(f.ctx, p+"w"); err != nil {
					f.t.Fatalf("DrainWorker: %v", err)
				}
				return p + "j", p + "w"
			}},
			{"WorkerOtherModel", func(f *fixture, p, key string) (string, string) {
				f.worker(p+"m2", "wa", "m2")
				return p + "j", p + "m2"
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := f.with(t)
				p := tc.name + "-"
				key := f.payer(p+"a", 100, 0)
				f.admit(key, p+"j", "m1", 1, at(1))
				f.worker(p+"w", "wa", "m1")
				job, worker := tc.setup(f, p, key)
				jobBefore, workerBefore := f.getJob(job), f.getWorker(worker)
				_, err := f.s.Assign(f.ctx, job, worker, at(100))
				wantErr(t, "Assign", err, store.ErrConflict)
				sameJob(t, "job after a lost Assign", f.getJob(job), jobBefore)
				sameWorker(t, "worker after a lost Assign", f.getWorker(worker), workerBefore)
			})
		}
	}},
	{"NotFound", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 1, at(1))
		f.worker("w1", "wa", "m1")
		_, err := f.s.Assign(f.ctx, "nope", "w1", at(2))
		wantErr(t, "Assign missing job", err, store.ErrNotFound)
		_, err = f.s.Assign(f.ctx, "j1", "nope", at(2))
		wantErr(t, "Assign to missing worker", err, store.ErrNotFound)
		if j := f.getJob("j1"); j.State != store.JobQueued {
			t.Errorf("job %s after failed Assign", j.State)
		}
		if w := f.getWorker("w1"); w.State != store.WorkerIdle || w.Job != "" {
			t.Errorf("worker %s/%q after failed Assign", w.State, w.Job)
		}
	}},
	{"ConcurrentWorkersOneJob", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 1, at(1))
		for i := range 50 {
			// Two operators: one token holds at most MaxConnsPerToken.
			f.worker(fmt.Sprintf("w%02d", i), []string{"wa", "wb"}[i%2], "m1")
		}
		won := make([]store.Job, 50)
		errs := race(50, func(i int) error {
			var err error
			won[i], err = f.s.Assign(f.ctx, "j1", fmt.Sprintf("w%02d", i), at(10))
			return err
		})
		ok, by := tally(t, errs, store.ErrConflict)
		if ok != 1 || by[store.ErrConflict] != 49 {
			t.Fatalf("%d assigned, %d ErrConflict; want 1, 49", ok, by[store.ErrConflict])
		}
		winner := won[slices.Index(errs, nil)].Worker
		if j := f.getJob("j1"); j.State != store.JobAssigned || j.Worker != winner || j.Attempts != 1 {
			t.Errorf("job %+v, want assigned once to %s", j, winner)
		}
		ws, err := f.s.Workers(f.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		var busy []string
		for _, w := range ws {
			if w.State == store.WorkerBusy || w.Job != "" {
				busy = append(busy, w.Conn)
			}
		}
		if !slices.Equal(busy, []string{winner}) {
			t.Errorf("busy workers %v, want [%s]", busy, winner)
		}
	}},
	{"ConcurrentJobsOneWorker", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		for i := range 20 {
			f.admit(key, fmt.Sprintf("j%02d", i), "m1", 1, at(i))
		}
		f.worker("w1", "wa", "m1")
		errs := race(20, func(i int) error {
			_, err := f.s.Assign(f.ctx, fmt.Sprintf("j%02d", i), "w1", at(100))
			return err
		})
		ok, by := tally(t, errs, store.ErrConflict)
		if ok != 1 || by[store.ErrConflict] != 19 {
			t.Fatalf("%d assigned, %d ErrConflict; want 1, 19", ok, by[store.ErrConflict])
		}
		won := fmt.Sprintf("j%02d", slices.Index(errs, nil))
		if w := f.getWorker("w1"); w.Job != won {
			t.Errorf("worker holds %q, want %s", w.Job, won)
		}
		if q := f.queued("m1"); len(q) != 19 || slices.Contains(q, won) {
			t.Errorf("queue %v, want the 19 others", q)
		}
	}},
}

var requeueTests = []test{
	{"ThenReassign", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 1, at(1))
		f.admit(key, "j2", "m1", 1, at(2))
		f.worker("w1", "wa", "m1")
		f.worker("w2", "wb", "m1")
		f.assign("j1", "w1", at(10))
		got, err := f.s.Requeue(f.ctx, "j1", "w1", at(20))
		if err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		if got.State != store.JobQueued || got.Worker != "" || got.WorkerAccount != "" || got.WorkerPubkey != "" || !got.Updated.Equal(at(20)) {
			t.Errorf("requeued job %+v", got)
		}
		sameJob(t, "GetJob", f.getJob("j1"), got)
		if w := f.getWorker("w1"); w.State != store.WorkerIdle || w.Job != "" {
			t.Errorf("worker %s/%q after requeue, want idle", w.State, w.Job)
		}
		// The job keeps its place: it is still older than j2.
		if q := f.queued("m1"); !slices.Equal(q, []string{"j1", "j2"}) {
			t.Errorf("queue %v, want [j1 j2]", q)
		}
		j := f.assign("j1", "w2", at(30))
		if j.Worker != "w2" || j.WorkerAccount != "wb" || j.WorkerPubkey != "pubkey-w2" || j.Attempts != 2 {
			t.Errorf("reassigned job %+v, want w2/wb, attempt 2", j)
		}
	}},
	{"Errors", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		f.worker("w2", "wa", "m1")
		f.admit(key, "queued", "m1", 1, at(1))
		f.admit(key, "assigned", "m1", 1, at(2))
		f.admit(key, "done", "m1", 1, at(3))
		f.assign("done", "w2", at(4))
		f.complete("done", "w2", at(5))
		f.assign("assigned", "w1", at(6))
		for _, tc := range []struct {
			job, worker string
			err         error
		}{
			{"assigned", "w2", store.ErrConflict},
			{"queued", "w1", store.ErrConflict},
			{"done", "w2", store.ErrConflict},
			{"missing", "w1", store.ErrNotFound},
		} {
			before, _ := f.s.GetJob(f.ctx, tc.job)
			_, err := f.s.Requeue(f.ctx, tc.job, tc.worker, at(10))
			wantErr(t, fmt.Sprintf("Requeue %s from %s", tc.job, tc.worker), err, tc.err)
			after, _ := f.s.GetJob(f.ctx, tc.job)
			sameJob(t, "job after refused Requeue", after, before)
		}
		if w := f.getWorker("w1"); w.Job != "assigned" {
			t.Errorf("w1 holds %q, want assigned", w.Job)
		}
	}},
	{"WorkerGone", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 1, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		if _, err := f.s.Requeue(f.ctx, "j1", "w1", at(3)); err != nil {
			t.Fatalf("Requeue after the worker left: %v", err)
		}
		if q := f.queued("m1"); !slices.Equal(q, []string{"j1"}) {
			t.Errorf("queue %v, want [j1]", q)
		}
		if _, err := f.s.GetWorker(f.ctx, "w1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Requeue recreated the deleted worker: %v", err)
		}
	}},
}

// complete completes an assigned job with fixed figures: 10 prompt
// tokens, 20 completion tokens, 1 credit earned (no job costs less), 2 tok/s.
func (f *fixture) complete(jobID, worker string, when time.Time) {
	f.t.Helper()
	if err := f.s.Complete(f.ctx, completion(jobID, worker, when)); err != nil {
		f.t.Fatalf("Complete %s: %v", jobID, err)
	}
}

func completion(jobID, worker string, when time.Time) store.Completion {
	return store.Completion{
		JobID: jobID, Worker: worker, PromptTokens: 10, CompletionTokens: 20,
		MilliTokPerSec: 2000, Earning: 1, At: when,
	}
}

// receipt is a receipt of jobID as the gateway hands it to Complete.
func receipt(jobID, worker string, deltas int64) *store.Receipt {
	return &store.Receipt{JobID: jobID, WorkerPubkey: "pubkey-" + worker, Model: "m1", ModelDigest: "sha256:d1",
		RequestSHA256: "aa" + jobID, OutputSHA256: "bb" + jobID, Deltas: deltas, PromptTokens: 10,
		CompletionTokens: 20, FirstTokenMillis: 30, TotalMillis: 400, Signature: "sig-" + jobID}
}

var completeTests = []test{
	{"Receipt", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		f.worker("w2", "wa", "m1")
		f.admit(key, "j1", "m1", 8, at(1))
		f.admit(key, "failed", "m1", 8, at(2))
		f.admit(key, "plain", "m1", 8, at(3))
		f.assign("j1", "w1", at(4))
		f.assign("failed", "w2", at(5))
		c := completion("j1", "w1", at(6))
		c.Receipt = receipt("j1", "w1", 20)
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		want := *receipt("j1", "w1", 20)
		want.AccountID = "payer" // the paying account, from the job
		got, err := f.s.GetReceipt(f.ctx, "j1")
		if err != nil || got != want {
			t.Fatalf("GetReceipt = %+v, %v; want %+v", got, err, want)
		}
		// A retried Complete, even with another receipt, changes nothing.
		again := completion("j1", "w1", at(9))
		again.Receipt = receipt("j1", "w1", 999)
		again.Receipt.Signature = "another"
		if err := f.s.Complete(f.ctx, again); err != nil {
			t.Fatalf("Complete again: %v", err)
		}
		if got, err := f.s.GetReceipt(f.ctx, "j1"); err != nil || got != want {
			t.Errorf("after a retried Complete: %+v, %v; want %+v", got, err, want)
		}
		// A failed job has none, even when a Complete with one comes late.
		if _, err := f.s.Fail(f.ctx, "failed", "bad_receipt", true, at(7)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		late := completion("failed", "w2", at(8))
		late.Receipt = receipt("failed", "w2", 20)
		wantErr(t, "Complete of a failed job", f.s.Complete(f.ctx, late), store.ErrConflict)
		// A receipt of another job is refused and stores nothing.
		f.assign("plain", "w2", at(10))
		wrong := completion("plain", "w2", at(11))
		wrong.Receipt = receipt("j1", "w2", 20)
		if err := f.s.Complete(f.ctx, wrong); err == nil {
			t.Error("Complete took a receipt of another job")
		}
		if j := f.getJob("plain"); j.State != store.JobAssigned {
			t.Errorf("job after a refused Complete: %s", j.State)
		}
		// Completed without a receipt: none is stored.
		f.complete("plain", "w2", at(12))
		for _, id := range []string{"failed", "plain", "missing"} {
			if r, err := f.s.GetReceipt(f.ctx, id); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetReceipt %s = %+v, %v; want ErrNotFound", id, r, err)
			}
		}
	}},
	{"ReceiptConcurrent", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		// 20 racing completions, each with its own receipt: one wins, and
		// the stored receipt is the winner's whole, not a mix.
		tally(t, race(20, func(i int) error {
			c := completion("j1", "w1", at(3))
			c.Receipt = receipt("j1", "w1", int64(i))
			c.Receipt.Signature = fmt.Sprintf("sig-%d", i)
			return f.s.Complete(f.ctx, c)
		}))
		got, err := f.s.GetReceipt(f.ctx, "j1")
		if err != nil {
			t.Fatalf("GetReceipt: %v", err)
		}
		if got.Signature != fmt.Sprintf("sig-%d", got.Deltas) {
			t.Errorf("stored receipt %+v mixes completions", got)
		}
		if a := f.getAccount("wa"); a.Earned != 1 {
			t.Errorf("earned %d, want 1", a.Earned)
		}
	}},
	{"Success", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		assigned := f.assign("j1", "w1", at(2))
		c := store.Completion{JobID: "j1", Worker: "w1", PromptTokens: 11, CompletionTokens: 42,
			MilliTokPerSec: 12345, Earning: 6, At: at(3)}
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		want := assigned
		want.State, want.PromptTokens, want.CompletionTokens, want.Updated = store.JobDone, 11, 42, at(3)
		sameJob(t, "completed job", f.getJob("j1"), want)
		w := f.getWorker("w1")
		if w.State != store.WorkerIdle || w.Job != "" || w.MilliTokPerSec != 12345 {
			t.Errorf("worker %+v, want idle at 12345 mtok/s", w)
		}
		if a := f.getAccount("wa"); a.Earned != 6 || a.Credits != 0 {
			t.Errorf("worker account earned %d, credits %d; want 6, 0", a.Earned, a.Credits)
		}
		if a := f.getAccount("payer"); a.Credits != 92 || a.TotalSpent != 8 || a.Earned != 0 {
			t.Errorf("payer %+v, want credits 92, spent 8", a)
		}
		st, err := f.s.Stats(f.ctx, at(3))
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.JobsCompleted != 1 || st.TokensServed != 42 {
			t.Errorf("stats %+v, want 1 job, 42 tokens", st)
		}
	}},
	{"EarningAbovePrice", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		assigned := f.assign("j1", "w1", at(2))
		c := completion("j1", "w1", at(3))
		c.Earning = 9
		if err := f.s.Complete(f.ctx, c); err == nil {
			t.Fatal("Complete paid more than the job's price")
		}
		sameJob(t, "job after refused Complete", f.getJob("j1"), assigned)
		if a := f.getAccount("wa"); a.Earned != 0 {
			t.Errorf("earned %d", a.Earned)
		}
	}},
	{"Twice", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		f.complete("j1", "w1", at(3))
		done := f.getJob("j1")
		again := completion("j1", "w1", at(9))
		again.CompletionTokens, again.Earning = 999, 999
		if err := f.s.Complete(f.ctx, again); err != nil {
			t.Fatalf("Complete again: %v", err)
		}
		sameJob(t, "job after second Complete", f.getJob("j1"), done)
		if a := f.getAccount("wa"); a.Earned != 1 {
			t.Errorf("earned %d, want 1", a.Earned)
		}
		if st, _ := f.s.Stats(f.ctx, at(3)); st.JobsCompleted != 1 || st.TokensServed != 20 {
			t.Errorf("stats %+v, want 1 job, 20 tokens", st)
		}
	}},
	{"Concurrent", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		tally(t, race(50, func(int) error { return f.s.Complete(f.ctx, completion("j1", "w1", at(3))) }))
		if a := f.getAccount("wa"); a.Earned != 1 {
			t.Errorf("earned %d, want 1", a.Earned)
		}
		if st, _ := f.s.Stats(f.ctx, at(3)); st.JobsCompleted != 1 || st.TokensServed != 20 {
			t.Errorf("stats %+v, want 1 job, 20 tokens", st)
		}
	}},
	{"UnmeasuredSpeedKept", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		f.admit(key, "j1", "m1", 1, at(1))
		f.assign("j1", "w1", at(2))
		f.complete("j1", "w1", at(3))
		f.admit(key, "j2", "m1", 1, at(4))
		f.assign("j2", "w1", at(5))
		c := completion("j2", "w1", at(6))
		c.MilliTokPerSec = 0
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if w := f.getWorker("w1"); w.MilliTokPerSec != 2000 || w.State != store.WorkerIdle {
			t.Errorf("worker %+v, want idle, speed 2000 kept", w)
		}
	}},
	{"WorkerGone", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 8, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		f.complete("j1", "w1", at(3))
		if j := f.getJob("j1"); j.State != store.JobDone {
			t.Errorf("job %s, want done", j.State)
		}
		if a := f.getAccount("wa"); a.Earned != 1 {
			t.Errorf("earned %d, want 1: the worker is paid after it left", a.Earned)
		}
		if _, err := f.s.GetWorker(f.ctx, "w1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Complete recreated the deleted worker: %v", err)
		}
	}},
	{"Errors", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1")
		f.worker("w2", "wa", "m1")
		f.admit(key, "queued", "m1", 1, at(1))
		f.admit(key, "assigned", "m1", 1, at(2))
		f.admit(key, "failed", "m1", 1, at(3))
		f.assign("assigned", "w1", at(4))
		f.assign("failed", "w2", at(5))
		if _, err := f.s.Fail(f.ctx, "failed", "worker_error", true, at(6)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		for _, tc := range []struct {
			job, worker string
			err         error
		}{
			{"assigned", "w2", store.ErrConflict},
			{"queued", "w1", store.ErrConflict},
			{"failed", "w2", store.ErrConflict},
			{"missing", "w1", store.ErrNotFound},
		} {
			before, _ := f.s.GetJob(f.ctx, tc.job)
			err := f.s.Complete(f.ctx, completion(tc.job, tc.worker, at(10)))
			wantErr(t, fmt.Sprintf("Complete %s on %s", tc.job, tc.worker), err, tc.err)
			after, _ := f.s.GetJob(f.ctx, tc.job)
			sameJob(t, "job after refused Complete", after, before)
		}
		if a := f.getAccount("wa"); a.Earned != 0 {
			t.Errorf("earned %d after refused completions", a.Earned)
		}
		if st, _ := f.s.Stats(f.ctx, at(10)); st.JobsCompleted != 0 {
			t.Errorf("jobs completed %d", st.JobsCompleted)
		}
		if w := f.getWorker("w1"); w.Job != "assigned" {
			t.Errorf("w1 holds %q, want assigned", w.Job)
		}
	}},
}

var failTests = []test{
	{"Queued", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		queued := f.admit(key, "j1", "m1", 10, at(1))
		got, err := f.s.Fail(f.ctx, "j1", "queue_timeout", false, at(2))
		if err != nil {
			t.Fatalf("Fail: %v", err)
		}
		want := queued
		want.State, want.FailReason, want.Updated = store.JobFailed, "queue_timeout", at(2)
		sameJob(t, "Fail result", got, want)
		sameJob(t, "GetJob", f.getJob("j1"), want)
		if q := f.queued("m1"); len(q) != 0 {
			t.Errorf("queue %v, want empty", q)
		}
		if a := f.getAccount("a1"); a.Credits != 90 || a.TotalSpent != 10 {
			t.Errorf("account %+v: a failure without refund changed it", a)
		}
	}},
	{"AssignedWithRefund", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 10, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		got, err := f.s.Fail(f.ctx, "j1", "worker_lost", true, at(3))
		if err != nil {
			t.Fatalf("Fail: %v", err)
		}
		if got.State != store.JobFailed || !got.Refunded || got.FailReason != "worker_lost" || got.Worker != "w1" {
			t.Errorf("failed job %+v", got)
		}
		sameJob(t, "GetJob", f.getJob("j1"), got)
		if w := f.getWorker("w1"); w.State != store.WorkerIdle || w.Job != "" {
			t.Errorf("worker %s/%q, want idle", w.State, w.Job)
		}
		if a := f.getAccount("a1"); a.Credits != 100 || a.TotalSpent != 0 {
			t.Errorf("account %+v, want refunded", a)
		}
	}},
	{"RefundAskedLater", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 10, at(1))
		first, err := f.s.Fail(f.ctx, "j1", "client_gone", false, at(2))
		if err != nil {
			t.Fatalf("Fail: %v", err)
		}
		again, err := f.s.Fail(f.ctx, "j1", "other_reason", false, at(3))
		if err != nil {
			t.Fatalf("Fail again: %v", err)
		}
		sameJob(t, "failing again without refund", again, first)
		refunded, err := f.s.Fail(f.ctx, "j1", "other_reason", true, at(4))
		if err != nil {
			t.Fatalf("Fail with refund: %v", err)
		}
		want := first
		want.Refunded = true
		refunded.Updated = want.Updated // may or may not move; not part of the contract
		sameJob(t, "failing again with refund", refunded, want)
		if a := f.getAccount("a1"); a.Credits != 100 || a.TotalSpent != 0 {
			t.Errorf("account %+v, want refunded", a)
		}
		if _, err := f.s.Fail(f.ctx, "j1", "x", true, at(5)); err != nil {
			t.Fatalf("Fail a third time: %v", err)
		}
		if a := f.getAccount("a1"); a.Credits != 100 {
			t.Errorf("credits %d, want 100: refunded twice", a.Credits)
		}
	}},
	{"Done", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.account("wa", 0, 0)
		f.admit(key, "j1", "m1", 10, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		f.complete("j1", "w1", at(3))
		done := f.getJob("j1")
		_, err := f.s.Fail(f.ctx, "j1", "timeout", true, at(4))
		wantErr(t, "Fail after Complete", err, store.ErrConflict)
		sameJob(t, "job", f.getJob("j1"), done)
		if a := f.getAccount("a1"); a.Credits != 90 {
			t.Errorf("credits %d, want 90: a done job is not refunded", a.Credits)
		}
	}},
	{"Missing", func(t *testing.T, f *fixture) {
		_, err := f.s.Fail(f.ctx, "nope", "timeout", true, at(1))
		wantErr(t, "Fail missing job", err, store.ErrNotFound)
	}},
	{"ConcurrentRefund", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 4)
		f.admit(key, "j1", "m1", 10, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		tally(t, race(100, func(int) error {
			_, err := f.s.Fail(f.ctx, "j1", "worker_lost", true, at(3))
			return err
		}))
		if a := f.getAccount("a1"); a.Credits != 100 || a.FreeAllowanceLeft != 4 || a.TotalSpent != 0 {
			t.Errorf("credits %d, allowance %d, spent %d; want 100, 4, 0 (one refund)",
				a.Credits, a.FreeAllowanceLeft, a.TotalSpent)
		}
		if j := f.getJob("j1"); !j.Refunded || j.State != store.JobFailed {
			t.Errorf("job %+v", j)
		}
	}},
	{"LeavesWorkersOtherJob", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 1, at(1))
		f.admit(key, "j2", "m1", 1, at(2))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(3))
		if _, err := f.s.Requeue(f.ctx, "j1", "w1", at(4)); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		f.assign("j2", "w1", at(5))
		if _, err := f.s.Fail(f.ctx, "j1", "queue_timeout", true, at(6)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		if w := f.getWorker("w1"); w.State != store.WorkerBusy || w.Job != "j2" {
			t.Errorf("worker %s/%q, want still busy with j2", w.State, w.Job)
		}
	}},
	{"EndingOldJobLeavesNewRecord", func(t *testing.T, f *fixture) {
		// A worker record that no longer holds the job (here: the
		// connection id came back with a new record and a new job) is
		// not freed by whatever ends the old job.
		f.account("wa", 0, 0)
		for name, end := range map[string]func(f *fixture, job string) error{
			"Requeue": func(f *fixture, job string) error {
				_, err := f.s.Requeue(f.ctx, job, "w-"+job, at(10))
				return err
			},
			"Complete": func(f *fixture, job string) error {
				return f.s.Complete(f.ctx, completion(job, "w-"+job, at(10)))
			},
			"Fail": func(f *fixture, job string) error {
				_, err := f.s.Fail(f.ctx, job, "worker_lost", true, at(10))
				return err
			},
		} {
			t.Run(name, func(t *testing.T) {
				f := f.with(t)
				key := f.payer("payer-"+name, 100, 0)
				conn := "w-" + name
				f.admit(key, name, "m1", 1, at(1))
				f.admit(key, name+"-next", "m1", 1, at(2))
				f.worker(conn, "wa", "m1")
				f.assign(name, conn, at(3))
				if _, err := f.s.DeleteWorker(f.ctx, conn); err != nil {
					t.Fatalf("DeleteWorker: %v", err)
				}
				f.worker(conn, "wa", "m1")
				f.assign(name+"-next", conn, at(4))
				if err := end(f, name); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if w := f.getWorker(conn); w.State != store.WorkerBusy || w.Job != name+"-next" {
					t.Errorf("worker %s/%q, want still busy with %s-next", w.State, w.Job, name)
				}
			})
		}
	}},
	{"WorkerGone", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.admit(key, "j1", "m1", 10, at(1))
		f.worker("w1", "wa", "m1")
		f.assign("j1", "w1", at(2))
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		if _, err := f.s.Fail(f.ctx, "j1", "worker_lost", true, at(3)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		if _, err := f.s.GetWorker(f.ctx, "w1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Fail recreated the deleted worker: %v", err)
		}
		if a := f.getAccount("a1"); a.Credits != 100 {
			t.Errorf("credits %d, want 100", a.Credits)
		}
	}},
}

var dispatchTests = []test{
	// Many dispatchers racing over many jobs and workers, the way the
	// gateway's instances do: each job runs exactly once, no worker ever
	// holds two jobs, and every credit is accounted for.
	{"ConcurrentDispatchers", func(t *testing.T, f *fixture) {
		const jobs, workers, dispatchers = 40, 8, 6
		key := f.payer("payer", 10_000, 0)
		f.account("wa", 0, 0)
		for i := range jobs {
			f.admit(key, fmt.Sprintf("j%02d", i), "m1", 10, at(i))
		}
		for i := range workers {
			f.worker(fmt.Sprintf("w%d", i), "wa", "m1")
		}
		var mu sync.Mutex
		ran := map[string]int{}
		errs := race(dispatchers, func(int) error {
			for {
				q, err := f.s.QueuedJobs(f.ctx, "m1", 1)
				if err != nil {
					return err
				}
				if len(q) == 0 {
					return nil
				}
				idle, err := f.s.IdleWorkers(f.ctx, "m1")
				if err != nil {
					return err
				}
				if len(idle) == 0 {
					continue
				}
				w := idle[len(q[0].ID)%len(idle)].Conn
				if _, err := f.s.Assign(f.ctx, q[0].ID, w, at(100)); errors.Is(err, store.ErrConflict) {
					continue
				} else if err != nil {
					return err
				}
				mu.Lock()
				ran[q[0].ID]++
				mu.Unlock()
				if err := f.s.Complete(f.ctx, completion(q[0].ID, w, at(200))); err != nil {
					return err
				}
			}
		})
		tally(t, errs)
		if len(ran) != jobs {
			t.Errorf("%d jobs ran, want %d", len(ran), jobs)
		}
		for id, n := range ran {
			if n != 1 {
				t.Errorf("job %s assigned %d times", id, n)
			}
		}
		ws, err := f.s.Workers(f.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		for _, w := range ws {
			if w.State != store.WorkerIdle || w.Job != "" {
				t.Errorf("worker %s left %s with %q", w.Conn, w.State, w.Job)
			}
		}
		if a := f.getAccount("wa"); a.Earned != jobs {
			t.Errorf("earned %d, want %d", a.Earned, jobs)
		}
		if a := f.getAccount("payer"); a.Credits != 10_000-10*jobs {
			t.Errorf("payer credits %d, want %d", a.Credits, 10_000-10*jobs)
		}
		if st, _ := f.s.Stats(f.ctx, at(200)); st.JobsCompleted != jobs || st.TokensServed != 20*jobs {
			t.Errorf("stats %+v", st)
		}
	}},
}
