package devnet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/store"
)

// lostAdmit commits Admit and then reports an error, as a store call does
// whose reply was lost after the write went through.
type lostAdmit struct {
	store.Store
	job string
}

func (s *lostAdmit) Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error) {
	adm, err := s.Store.Admit(ctx, r)
	if err != nil {
		return adm, err
	}
	s.job = adm.Job.ID
	return store.Admission{}, errors.New("injected: reply lost")
}

// TestAdmitReplyLost: the client gets an error and is not charged, and the
// job that did get written is failed, so no worker ever picks it up.
func TestAdmitReplyLost(t *testing.T) {
	st := &lostAdmit{Store: openStore(t)}
	e := newEnv(t, envOptions{credits: 100, store: st})
	e.workerLeft(tinyModel)
	_, err := e.client.Chat.Completions.New(context.Background(), chatParams("hello world", 4))
	if err == nil {
		t.Fatal("request succeeded; want an error")
	}
	if a := e.balance(); a.Credits != 100 || a.TotalSpent != 0 {
		t.Errorf("credits %d, spent %d; want 100, 0 (refunded)", a.Credits, a.TotalSpent)
	}
	j, err := st.GetJob(context.Background(), st.job)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobFailed || !j.Refunded || j.FailReason != "admit_error" {
		t.Errorf("job %s refunded=%v reason=%q; want failed, refunded, admit_error", j.State, j.Refunded, j.FailReason)
	}
}

// lostAdmitAssign commits AdmitAssign and then reports an error, as
// lostAdmit does for Admit.
type lostAdmitAssign struct {
	store.Store
	job      string
	assigned bool
}

func (s *lostAdmitAssign) AdmitAssign(ctx context.Context, r store.AdmitRequest, worker string) (store.Admission, bool, error) {
	adm, assigned, err := s.Store.(dispatch.AdmitAssigner).AdmitAssign(ctx, r, worker)
	if err != nil {
		return adm, assigned, err
	}
	s.job, s.assigned = adm.Job.ID, assigned
	return store.Admission{}, false, errors.New("injected: reply lost")
}

// TestAdmitAssignReplyLost: as TestAdmitReplyLost, with a worker idle at
// admission, so the lost write had also made the worker busy with the job:
// the job is failed and refunded, and the worker is idle again, free for
// the next job.
func TestAdmitAssignReplyLost(t *testing.T) {
	st := &lostAdmitAssign{Store: openStore(t)}
	e := newEnv(t, envOptions{credits: 100, store: st})
	ctx := context.Background()
	conn := "idle-worker"
	if err := st.PutWorker(ctx, store.Worker{Conn: conn, AccountID: e.account, State: store.WorkerIdle, ConnectedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RegisterWorker(ctx, conn, []string{tinyModel}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Chat.Completions.New(ctx, chatParams("hello world", 4))
	if err == nil {
		t.Fatal("request succeeded; want an error")
	}
	if !st.assigned {
		t.Fatal("the admission did not claim the idle worker: nothing here was tested")
	}
	if a := e.balance(); a.Credits != 100 || a.TotalSpent != 0 {
		t.Errorf("credits %d, spent %d; want 100, 0 (refunded)", a.Credits, a.TotalSpent)
	}
	j, err := st.GetJob(ctx, st.job)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != store.JobFailed || !j.Refunded || j.FailReason != "admit_error" {
		t.Errorf("job %s refunded=%v reason=%q; want failed, refunded, admit_error", j.State, j.Refunded, j.FailReason)
	}
	w, err := st.GetWorker(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if w.State != store.WorkerIdle || w.Job != "" {
		t.Errorf("worker %s with job %q; want idle, free for the next job", w.State, w.Job)
	}
}
