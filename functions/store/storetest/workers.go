package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

var workerTests = []test{
	{"Lifecycle", func(t *testing.T, f *fixture) {
		want := f.putWorker("w1", "wa")
		sameWorker(t, "GetWorker", f.getWorker("w1"), want)
		dup := want
		dup.AccountID = "other"
		wantErr(t, "PutWorker same conn", f.s.PutWorker(f.ctx, dup), store.ErrExists)
		sameWorker(t, "worker after duplicate put", f.getWorker("w1"), want)

		reg, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1", "m2"})
		if err != nil {
			t.Fatalf("RegisterWorker: %v", err)
		}
		want.Registered, want.Models = true, []string{"m1", "m2"}
		sameWorker(t, "RegisterWorker result", reg, want)
		sameWorker(t, "registered worker", f.getWorker("w1"), want)

		drained, err := f.s.DrainWorker(f.ctx, "w1")
		if err != nil {
			t.Fatalf("DrainWorker: %v", err)
		}
		want.Draining = true
		sameWorker(t, "DrainWorker result", drained, want)
		sameWorker(t, "drained worker", f.getWorker("w1"), want)

		f.putWorker("w2", "wb")
		all, err := f.s.Workers(f.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		if got := conns(all); !slices.Equal(got, []string{"w1", "w2"}) {
			t.Errorf("Workers %v, want [w1 w2]", got)
		}

		gone, err := f.s.DeleteWorker(f.ctx, "w1")
		if err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		sameWorker(t, "DeleteWorker result", gone, want)
		for name, call := range map[string]func() error{
			"GetWorker":      func() error { _, err := f.s.GetWorker(f.ctx, "w1"); return err },
			"DeleteWorker":   func() error { _, err := f.s.DeleteWorker(f.ctx, "w1"); return err },
			"RegisterWorker": func() error { _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1"}); return err },
			"DrainWorker":    func() error { _, err := f.s.DrainWorker(f.ctx, "w1"); return err },
		} {
			wantErr(t, name+" of a deleted worker", call(), store.ErrNotFound)
		}
		all, _ = f.s.Workers(f.ctx)
		if got := conns(all); !slices.Equal(got, []string{"w2"}) {
			t.Errorf("Workers after delete %v, want [w2]", got)
		}
	}},
	{"IdleWorkers", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		f.worker("idle", "wa", "m1", "m2")
		f.worker("idle2", "wa", "m2")
		f.putWorker("unregistered", "wa")
		f.worker("busy", "wa", "m1")
		f.worker("draining", "wa", "m1")
		f.worker("othermodel", "wa", "m3")
		f.admit(key, "j1", "m1", 1, at(1))
		f.assign("j1", "busy", at(2))
		if _, err := f.s.DrainWorker(f.ctx, "draining"); err != nil {
			t.Fatalf("DrainWorker: %v", err)
		}
		for model, want := range map[string][]string{
			"m1": {"idle"},
			"m2": {"idle", "idle2"},
			"m3": {"othermodel"},
			"m4": {},
		} {
			idle, err := f.s.IdleWorkers(f.ctx, model)
			if err != nil {
				t.Fatalf("IdleWorkers: %v", err)
			}
			if got := conns(idle); !slices.Equal(got, want) {
				t.Errorf("IdleWorkers(%s) %v, want %v", model, got, want)
			}
		}
	}},
}

var listenerTests = []test{
	{"Lifecycle", func(t *testing.T, f *fixture) {
		want := store.Listener{Conn: "l1", ConnectedAt: at(1)}
		if err := f.s.PutListener(f.ctx, want); err != nil {
			t.Fatalf("PutListener: %v", err)
		}
		got, err := f.s.GetListener(f.ctx, "l1")
		if err != nil {
			t.Fatalf("GetListener: %v", err)
		}
		if got.Conn != want.Conn || !got.ConnectedAt.Equal(want.ConnectedAt) {
			t.Errorf("GetListener %+v, want %+v", got, want)
		}
		if err := f.s.DeleteListener(f.ctx, "l1"); err != nil {
			t.Fatalf("DeleteListener: %v", err)
		}
		_, err = f.s.GetListener(f.ctx, "l1")
		wantErr(t, "GetListener after delete", err, store.ErrNotFound)
		wantErr(t, "DeleteListener again", f.s.DeleteListener(f.ctx, "l1"), store.ErrNotFound)
	}},
}

var statsTests = []test{
	{"Empty", func(t *testing.T, f *fixture) {
		st, err := f.s.Stats(f.ctx, base)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if len(st.WorkersByModel) != 0 || len(st.QueueByModel) != 0 || st.JobsCompleted != 0 ||
			st.TokensServed != 0 || st.TokensLastMinute != 0 {
			t.Errorf("stats of an empty store %+v", st)
		}
	}},
	{"Figures", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1000, 0)
		f.account("wa", 0, 0)
		f.worker("w1", "wa", "m1", "m2")
		f.worker("w2", "wa", "m1")
		f.putWorker("unregistered", "wa")
		f.worker("w3", "wa", "m3")

		// Completions around minute 12:04, reported out of order.
		t0 := base.Add(4 * time.Minute)
		for i, c := range []struct {
			at     time.Time
			tokens int64
		}{
			{t0.Add(10 * time.Second), 100},
			{t0.Add(70 * time.Second), 7},
			{t0.Add(-time.Second), 1000},
			{t0.Add(59*time.Second + 999*time.Millisecond), 50},
			{t0, 3},
		} {
			id := "done" + string(rune('a'+i))
			f.admit(key, id, "m3", 1, at(i))
			f.assign(id, "w3", c.at)
			cp := completion(id, "w3", c.at)
			cp.CompletionTokens = c.tokens
			if err := f.s.Complete(f.ctx, cp); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}
		// Queue: two waiting for m1, one for m2, one m1 job assigned, one
		// failed.
		for _, j := range []struct{ id, model string }{
			{"q1", "m1"}, {"q2", "m1"}, {"q3", "m2"}, {"q4", "m1"}, {"q5", "m1"},
		} {
			f.admit(key, j.id, j.model, 1, at(100))
		}
		f.assign("q4", "w2", at(101))
		if _, err := f.s.Fail(f.ctx, "q5", "queue_timeout", true, at(102)); err != nil {
			t.Fatalf("Fail: %v", err)
		}

		for _, tc := range []struct {
			now  time.Time
			last int64
		}{
			{t0.Add(90 * time.Second), 153}, // last full minute is 12:04
			{t0.Add(60 * time.Second), 153}, // exactly 12:05:00
			{t0.Add(59 * time.Second), 1000},
			{t0.Add(125 * time.Second), 7},
			{t0.Add(10 * time.Minute), 0},
		} {
			st, err := f.s.Stats(f.ctx, tc.now)
			if err != nil {
				t.Fatalf("Stats: %v", err)
			}
			if st.TokensLastMinute != tc.last {
				t.Errorf("TokensLastMinute at %v: %d, want %d", tc.now.Format(time.TimeOnly), st.TokensLastMinute, tc.last)
			}
			if st.JobsCompleted != 5 || st.TokensServed != 1160 {
				t.Errorf("completed %d, served %d; want 5, 1160", st.JobsCompleted, st.TokensServed)
			}
			if want := map[string]int64{"m1": 2, "m2": 1, "m3": 1}; !maps.Equal(st.WorkersByModel, want) {
				t.Errorf("WorkersByModel %v, want %v", st.WorkersByModel, want)
			}
			if want := map[string]int64{"m1": 2, "m2": 1}; !maps.Equal(st.QueueByModel, want) {
				t.Errorf("QueueByModel %v, want %v", st.QueueByModel, want)
			}
		}
	}},
}
