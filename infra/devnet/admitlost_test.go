package devnet_test

import (
	"context"
	"errors"
	"testing"

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
