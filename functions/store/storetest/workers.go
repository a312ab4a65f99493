package storetest

import (
	"fmt"
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

		reg, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1", "m2"}, nil)
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
			"RegisterWorker": func() error { _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1"}, nil); return err },
			"DrainWorker":    func() error { _, err := f.s.DrainWorker(f.ctx, "w1"); return err },
		} {
			wantErr(t, name+" of a deleted worker", call(), store.ErrNotFound)
		}
		all, _ = f.s.Workers(f.ctx)
		if got := conns(all); !slices.Equal(got, []string{"w2"}) {
			t.Errorf("Workers after delete %v, want [w2]", got)
		}
	}},
	{"Caps", func(t *testing.T, f *fixture) {
		want := f.putWorker("w1", "wa")
		caps := map[string]store.Caps{
			"m1": {Vision: true, Tools: true, ResponseFormat: true, Context: 32768},
			"m2": {},            // plain chat, said explicitly
			"m9": {Tools: true}, // not registered: not kept
		}
		reg, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1", "m2", "m3"}, caps)
		if err != nil {
			t.Fatalf("RegisterWorker: %v", err)
		}
		want.Registered, want.Models = true, []string{"m1", "m2", "m3"}
		want.Caps = map[string]store.Caps{"m1": caps["m1"], "m2": {}}
		sameWorker(t, "RegisterWorker result", reg, want)
		sameWorker(t, "GetWorker", f.getWorker("w1"), want)
		idle, err := f.s.IdleWorkers(f.ctx, "m1")
		if err != nil || len(idle) != 1 {
			t.Fatalf("IdleWorkers: %v, %v", idle, err)
		}
		sameWorker(t, "IdleWorkers", idle[0], want)
		all, err := f.s.Workers(f.ctx)
		if err != nil || len(all) != 1 {
			t.Fatalf("Workers: %v, %v", all, err)
		}
		sameWorker(t, "Workers", all[0], want)
		if w := f.getWorker("w1"); !w.CanServe("m1", store.Needs{Vision: true, Context: 4096}) || w.CanServe("m3", store.Needs{Tools: true}) {
			t.Errorf("CanServe of %+v", w)
		}

		// Registering again replaces them; none is plain chat everywhere.
		reg, err = f.s.RegisterWorker(f.ctx, "w1", []string{"m1"}, nil)
		if err != nil {
			t.Fatalf("RegisterWorker again: %v", err)
		}
		want.Models, want.Caps = []string{"m1"}, nil
		sameWorker(t, "RegisterWorker again", reg, want)
		sameWorker(t, "GetWorker after registering again", f.getWorker("w1"), want)
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
	{"ConnsPerToken", func(t *testing.T, f *fixture) {
		put := func(conn, token string) error {
			return f.s.PutWorker(f.ctx, store.Worker{Conn: conn, AccountID: "wa", TokenHash: token,
				State: store.WorkerIdle, ConnectedAt: base})
		}
		for i := range store.MaxConnsPerToken {
			if err := put(fmt.Sprintf("w%02d", i), "tok-1"); err != nil {
				t.Fatalf("PutWorker %d: %v", i, err)
			}
		}
		wantErr(t, "PutWorker over the cap", put("extra", "tok-1"), store.ErrLimit)
		_, err := f.s.GetWorker(f.ctx, "extra")
		wantErr(t, "GetWorker of the refused connection", err, store.ErrNotFound)
		wantErr(t, "PutWorker on another token of the account", put("other", "tok-2"), nil)

		// A disconnect frees its slot, and only one.
		if _, err := f.s.DeleteWorker(f.ctx, "w00"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		wantErr(t, "PutWorker after a disconnect", put("extra", "tok-1"), nil)
		wantErr(t, "PutWorker over the cap again", put("extra2", "tok-1"), store.ErrLimit)
		// A refused duplicate takes no slot.
		if _, err := f.s.DeleteWorker(f.ctx, "w01"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		wantErr(t, "PutWorker of a known connection", put("w02", "tok-1"), store.ErrExists)
		wantErr(t, "PutWorker into the freed slot", put("extra2", "tok-1"), nil)
		wantErr(t, "PutWorker over the cap at last", put("extra3", "tok-1"), store.ErrLimit)
		all, err := f.s.Workers(f.ctx)
		if err != nil {
			t.Fatalf("Workers: %v", err)
		}
		if len(all) != store.MaxConnsPerToken+1 {
			t.Errorf("%d workers, want %d on the token and 1 on the other", len(all), store.MaxConnsPerToken+1)
		}
	}},
	{"ConcurrentConnsPerToken", func(t *testing.T, f *fixture) {
		for round := range 2 {
			// 100 connects race on one token whose cap is 32.
			errs := race(100, func(i int) error {
				return f.s.PutWorker(f.ctx, store.Worker{Conn: fmt.Sprintf("r%d-w%03d", round, i), AccountID: "wa",
					TokenHash: "tok-1", State: store.WorkerIdle, ConnectedAt: base})
			})
			ok, by := tally(t, errs, store.ErrLimit)
			if ok != store.MaxConnsPerToken || by[store.ErrLimit] != 100-store.MaxConnsPerToken {
				t.Fatalf("round %d: %d connected, %d ErrLimit; want %d, %d",
					round, ok, by[store.ErrLimit], store.MaxConnsPerToken, 100-store.MaxConnsPerToken)
			}
			all, err := f.s.Workers(f.ctx)
			if err != nil {
				t.Fatalf("Workers: %v", err)
			}
			if len(all) != store.MaxConnsPerToken {
				t.Fatalf("round %d: %d workers stored, want %d", round, len(all), store.MaxConnsPerToken)
			}
			// They all disconnect at once; every slot comes back.
			tally(t, race(len(all), func(i int) error {
				_, err := f.s.DeleteWorker(f.ctx, all[i].Conn)
				return err
			}))
		}
	}},
	{"NoTokenNoCap", func(t *testing.T, f *fixture) {
		// A worker without a token counts against none (the relay
		// always sets one).
		for i := range store.MaxConnsPerToken + 1 {
			w := store.Worker{Conn: fmt.Sprintf("w%02d", i), AccountID: "wa", State: store.WorkerIdle, ConnectedAt: base}
			if err := f.s.PutWorker(f.ctx, w); err != nil {
				t.Fatalf("PutWorker %d: %v", i, err)
			}
		}
	}},
	{"RegisterOnRevokedToken", func(t *testing.T, f *fixture) {
		t1, t2 := secret("wa", 1, at(1)), secret("wa", 2, at(2))
		for _, s := range []store.Secret{t1, t2} {
			if err := f.s.PutWorkerToken(f.ctx, s); err != nil {
				t.Fatalf("PutWorkerToken: %v", err)
			}
		}
		for conn, tok := range map[string]string{"w1": t1.Hash, "w2": t2.Hash} {
			w := store.Worker{Conn: conn, AccountID: "wa", TokenHash: tok, State: store.WorkerIdle, ConnectedAt: base}
			if err := f.s.PutWorker(f.ctx, w); err != nil {
				t.Fatalf("PutWorker %s: %v", conn, err)
			}
		}
		// The revoke runs while w1 is still in $connect: its disconnect
		// cannot reach w1, so registration is where w1 is stopped.
		if _, err := f.s.RevokeWorkerToken(f.ctx, "wa", t1.ID, at(10)); err != nil {
			t.Fatalf("RevokeWorkerToken: %v", err)
		}
		_, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m1"}, nil)
		wantErr(t, "RegisterWorker on a revoked token", err, store.ErrRevoked)
		if w := f.getWorker("w1"); w.Registered || len(w.Models) != 0 {
			t.Errorf("worker on a revoked token registered: %+v", w)
		}
		if _, err := f.s.RegisterWorker(f.ctx, "w2", []string{"m1"}, nil); err != nil {
			t.Fatalf("RegisterWorker on an active token: %v", err)
		}
		idle, err := f.s.IdleWorkers(f.ctx, "m1")
		if err != nil {
			t.Fatalf("IdleWorkers: %v", err)
		}
		if got := conns(idle); !slices.Equal(got, []string{"w2"}) {
			t.Errorf("IdleWorkers %v, want [w2]", got)
		}
		// The caller closes the connection; its disconnect deletes it.
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Errorf("DeleteWorker of the refused worker: %v", err)
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

var statsTests = append([]test{
	{"Empty", func(t *testing.T, f *fixture) {
		st, err := f.s.Stats(f.ctx, base)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.WorkersOnline != 0 || len(st.WorkersByModel) != 0 || len(st.QueueByModel) != 0 || st.JobsCompleted != 0 ||
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
			if st.WorkersOnline != 4 {
				t.Errorf("WorkersOnline %d, want 4 (one unregistered)", st.WorkersOnline)
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
}, countTests...)
