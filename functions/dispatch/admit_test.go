package dispatch

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

// writeCounter counts the store writes of the request path.
type writeCounter struct {
	*embedded.Store
	admits, assigns, admitAssigns atomic.Int32
}

func (c *writeCounter) Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error) {
	c.admits.Add(1)
	return c.Store.Admit(ctx, r)
}

func (c *writeCounter) Assign(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	c.assigns.Add(1)
	return c.Store.Assign(ctx, jobID, worker, at)
}

func (c *writeCounter) AdmitAssign(ctx context.Context, r store.AdmitRequest, worker string) (store.Admission, bool, error) {
	c.admitAssigns.Add(1)
	return c.Store.AdmitAssign(ctx, r, worker)
}

// plainStore hides AdmitAssign: a store that cannot admit and assign in
// one write (the interface is optional).
type plainStore struct{ *writeCounter }

func (plainStore) AdmitAssign() {}

// TestAdmitAssignsInOneWrite: with a worker idle in the dispatcher's list,
// Admit assigns the job in the same store write; with none (or the one
// listed just taken elsewhere) the job is admitted queued and Assign or a
// Dispatch takes it from there; a store without AdmitAssign always
// admits queued.
func TestAdmitAssignsInOneWrite(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	es, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer es.Close()
	st := &writeCounter{Store: es}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(st.CreateAccount(ctx, store.Account{ID: "a", Credits: 100}))
	must(st.CreateAccount(ctx, store.Account{ID: "wa"}))
	must(st.PutAPIKey(ctx, store.Secret{Hash: "h", ID: "k", AccountID: "a", CreatedAt: now}))
	register := func(d *Dispatcher, conn string) {
		t.Helper()
		must(st.PutWorker(ctx, store.Worker{Conn: conn, AccountID: "wa"}))
		w, err := st.RegisterWorker(ctx, conn, []string{"m"}, nil)
		must(err)
		d.Registered(w)
	}
	req := func(id string) store.AdmitRequest {
		return store.AdmitRequest{KeyHash: "h", Window: now, Limit: 100,
			Job: store.Job{ID: id, Model: "m", Price: 1, Listener: "l", Created: now}}
	}
	writes := func(admits, assigns, admitAssigns int32) {
		t.Helper()
		if a, b, c := st.admits.Swap(0), st.assigns.Swap(0), st.admitAssigns.Swap(0); a != admits || b != assigns || c != admitAssigns {
			t.Fatalf("store writes: %d Admit, %d Assign, %d AdmitAssign; want %d, %d, %d", a, b, c, admits, assigns, admitAssigns)
		}
	}
	d := New(st, nopPoster{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	d.now = func() time.Time { return now }

	// No worker listed: queued, by a plain Admit.
	adm, err := d.Admit(ctx, req("j1"))
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("no worker: job is %s, want queued", adm.Job.State)
	}
	writes(1, 0, 0)

	// A worker registers and is listed: the next job is assigned to it at
	// admission, in one write.
	register(d, "w1")
	adm, err = d.Admit(ctx, req("j2"))
	must(err)
	if adm.Job.State != store.JobAssigned || adm.Job.Worker != "w1" || adm.Job.WorkerAccount != "wa" || adm.Job.Attempts != 1 {
		t.Fatalf("idle worker: job %+v, want assigned to w1", adm.Job)
	}
	writes(0, 0, 1)
	if j, err := st.GetJob(ctx, "j2"); err != nil || j.State != store.JobAssigned || j.Worker != "w1" {
		t.Fatalf("stored job: %+v, %v", j, err)
	}

	// w1 is busy now and out of the list: the next job is queued.
	adm, err = d.Admit(ctx, req("j3"))
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("busy worker: job is %s, want queued", adm.Job.State)
	}
	writes(1, 0, 0)

	// A worker listed here but taken elsewhere: AdmitAssign finds it
	// busy and the job is admitted queued; the Assign that follows loses
	// its claim on the worker, which leaves the list.
	register(d, "w2")
	other := New(st, nopPoster{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, ok, err := other.Assign(ctx, adm.Job); err != nil || !ok {
		t.Fatalf("the other dispatcher's claim: ok %v, err %v", ok, err)
	}
	st.assigns.Store(0)
	adm, err = d.Admit(ctx, req("j4"))
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("worker taken elsewhere: job is %s, want queued", adm.Job.State)
	}
	writes(0, 0, 1)
	if _, ok, err := d.Assign(ctx, adm.Job); err != nil || ok {
		t.Fatalf("Assign with every worker busy: ok %v, err %v", ok, err)
	}
	if ws, _ := d.idle.take("m", now); len(ws) != 0 {
		t.Fatalf("idle list after the lost claim: %v, want empty", ws)
	}
	st.assigns.Store(0)

	// Only an eligible worker is claimed at admission: not a quarantined
	// one for a real job, only the target for a targeted canary, only
	// one that has what the job needs.
	register(d, "wq")
	d.Judged("wq", store.StandingQuarantined, 1)
	adm, err = d.Admit(ctx, req("j4b"))
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("quarantined worker: job is %s on %q, want queued", adm.Job.State, adm.Job.Worker)
	}
	writes(1, 0, 0)
	register(d, "wt")
	tools := req("j4c")
	tools.Job.Needs.Tools = true
	adm, err = d.Admit(ctx, tools)
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("a job needing tools: on %q, want queued (no worker has tools)", adm.Job.Worker)
	}
	writes(1, 0, 0)
	register(d, "wu")
	canary := req("j4d")
	canary.Job.Canary, canary.Job.Target = true, "wq"
	canary.Limit = 1000
	adm, err = d.Admit(ctx, canary)
	must(err)
	if adm.Job.State != store.JobAssigned || adm.Job.Worker != "wq" {
		t.Fatalf("canary aimed at wq: job %s on %q, want assigned to wq", adm.Job.State, adm.Job.Worker)
	}
	writes(0, 0, 1)

	// A store that cannot admit and assign in one write: plain Admit,
	// then Assign, even with a worker listed.
	p := New(plainStore{st}, nopPoster{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	p.now = func() time.Time { return now }
	register(p, "w3")
	adm, err = p.Admit(ctx, req("j5"))
	must(err)
	if adm.Job.State != store.JobQueued {
		t.Fatalf("plain store: job is %s, want queued", adm.Job.State)
	}
	if j, ok, err := p.Assign(ctx, adm.Job); err != nil || !ok || j.State != store.JobAssigned {
		t.Fatalf("plain store's Assign: %+v, ok %v, err %v", j, ok, err)
	}
	writes(1, 1, 0)

	// A refused admission writes nothing and leaves the worker listed.
	broke := req("j6")
	broke.Job.Price = 1000
	if _, err := d.Admit(ctx, broke); err == nil {
		t.Fatal("an admission the account cannot pay went through")
	}
	if ws, _ := d.idle.take("m", now); len(ws) != 2 {
		t.Fatalf("idle list after a refused admission: %v, want wt and wu", ws)
	}
}
