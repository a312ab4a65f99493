package embedded

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// The conformance suite (functions/store/conformance_test.go) covers the
// store.Store contract; these tests cover what only this implementation
// does: surviving a restart and keeping its bookkeeping buckets small.

var t0 = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)

func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, WithNoSync())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// seed creates a paying account a1 with key "k1" and a worker account wa.
func seed(t testing.TB, s *Store, credits int64) {
	t.Helper()
	ctx := context.Background()
	must(t, s.CreateAccount(ctx, store.Account{ID: "a1", Credits: credits}))
	must(t, s.CreateAccount(ctx, store.Account{ID: "wa"}))
	must(t, s.PutAPIKey(ctx, store.Secret{Hash: "k1", ID: "k1", AccountID: "a1", CreatedAt: t0}))
}

func admitReq(id string, window time.Time, price int64) store.AdmitRequest {
	return store.AdmitRequest{
		KeyHash: "k1", Window: window, Limit: 1 << 40,
		Job: store.Job{ID: id, Model: "m1", Price: price, Listener: "l1", Created: t0},
	}
}

func worker(conn string) store.Worker {
	return store.Worker{Conn: conn, AccountID: "wa", TokenHash: "t1", State: store.WorkerIdle, ConnectedAt: t0}
}

func TestReopenDropsConnectionsAndRefundsInFlightJobs(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c0.db")
	s := open(t, path)
	seed(t, s, 100)
	for _, id := range []string{"queued", "assigned", "done"} {
		_, err := s.Admit(ctx, admitReq(id, t0, 10))
		must(t, err)
	}
	for _, conn := range []string{"w1", "w2"} {
		must(t, s.PutWorker(ctx, worker(conn)))
		_, err := s.RegisterWorker(ctx, conn, []string{"m1"}, nil)
		must(t, err)
	}
	must(t, s.PutListener(ctx, store.Listener{Conn: "l1", ConnectedAt: t0}))
	_, err := s.Assign(ctx, "assigned", "w1", t0)
	must(t, err)
	_, err = s.Assign(ctx, "done", "w2", t0)
	must(t, err)
	must(t, s.Complete(ctx, store.Completion{JobID: "done", Worker: "w2", CompletionTokens: 5, Earning: 7, At: t0}))
	must(t, s.Close())

	s = open(t, path)
	defer func() { must(t, s.Close()) }()
	if ws, err := s.Workers(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workers after reopen: %v, %v; want none", ws, err)
	}
	if _, err := s.GetListener(ctx, "l1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("listener after reopen: %v, want ErrNotFound", err)
	}
	for _, id := range []string{"queued", "assigned"} {
		j, err := s.GetJob(ctx, id)
		must(t, err)
		if j.State != store.JobFailed || !j.Refunded || j.FailReason != restartFailReason {
			t.Errorf("job %s after reopen: %+v, want failed and refunded", id, j)
		}
	}
	if j, _ := s.GetJob(ctx, "done"); j.State != store.JobDone || j.Refunded {
		t.Errorf("done job after reopen: %+v", j)
	}
	if a, _ := s.GetAccount(ctx, "a1"); a.Credits != 90 || a.TotalSpent != 10 {
		t.Errorf("payer after reopen: %+v, want only the done job paid", a)
	}
	if a, _ := s.GetAccount(ctx, "wa"); a.Earned != 7 {
		t.Errorf("worker account after reopen: %+v", a)
	}
	if st, _ := s.Stats(ctx, t0); st.JobsCompleted != 1 || len(st.QueueByModel) != 0 || st.WorkersOnline != 0 || len(st.WorkersByModel) != 0 {
		t.Errorf("stats after reopen: %+v, want the completion and no queue or workers", st)
	}
	// Reopening again changes nothing more: the refunds happened once.
	must(t, s.Close())
	s = open(t, path)
	if a, _ := s.GetAccount(ctx, "a1"); a.Credits != 90 {
		t.Errorf("credits after second reopen %d, want 90", a.Credits)
	}
}

func bucketLen(t *testing.T, s *Store, name []byte) int {
	t.Helper()
	n := 0
	must(t, s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(name).Stats().KeyN
		return nil
	}))
	return n
}

func TestRateWindowsPruned(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "c0.db"))
	defer func() { must(t, s.Close()) }()
	seed(t, s, 1000)
	for i := range 5 {
		_, err := s.Admit(ctx, admitReq(fmt.Sprint("j", i), t0.Add(time.Duration(i)*time.Minute), 1))
		must(t, err)
	}
	// Windows 12:00..12:04 were used; 12:04 is the newest, so 12:02 and
	// later are kept, for the key and for the account.
	for _, b := range [][]byte{bRateWindows, bAccountWindows} {
		if n := bucketLen(t, s, b); n != 3 {
			t.Errorf("%s: %d rate windows kept, want 3", b, n)
		}
	}
	// A late request for an old window does not prune newer ones.
	_, err := s.Admit(ctx, admitReq("late", t0, 1))
	must(t, err)
	for _, b := range [][]byte{bRateWindows, bAccountWindows} {
		if n := bucketLen(t, s, b); n != 4 {
			t.Errorf("%s: %d rate windows kept, want 4", b, n)
		}
	}
}

// TestReopenFreesTokenSlots: the connections a restart dropped no longer
// count against their token's cap.
func TestReopenFreesTokenSlots(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c0.db")
	s, err := Open(path, WithNoSync(), WithMaxConnsPerToken(2))
	must(t, err)
	for _, conn := range []string{"w1", "w2"} {
		must(t, s.PutWorker(ctx, worker(conn)))
	}
	if err := s.PutWorker(ctx, worker("w3")); !errors.Is(err, store.ErrLimit) {
		t.Fatalf("third connection on a token capped at 2: %v, want ErrLimit", err)
	}
	must(t, s.Close())
	s, err = Open(path, WithNoSync(), WithMaxConnsPerToken(2))
	must(t, err)
	defer func() { must(t, s.Close()) }()
	for _, conn := range []string{"w3", "w4"} {
		must(t, s.PutWorker(ctx, worker(conn)))
	}
	if n := bucketLen(t, s, bWorkersByToken); n != 2 {
		t.Errorf("%d token entries, want 2", n)
	}
}

func TestOpenRejectsZeroConnCap(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "c0.db"), WithMaxConnsPerToken(0)); err == nil {
		t.Fatal("Open with a cap of 0 connections per token: no error")
	}
}

func TestTokenMinutesPruned(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "c0.db"))
	defer func() { must(t, s.Close()) }()
	seed(t, s, 1000)
	must(t, s.PutWorker(ctx, worker("w1")))
	_, err := s.RegisterWorker(ctx, "w1", []string{"m1"}, nil)
	must(t, err)
	for i := range 20 {
		id := fmt.Sprint("j", i)
		_, err := s.Admit(ctx, admitReq(id, t0, 1))
		must(t, err)
		at := t0.Add(time.Duration(i) * time.Minute)
		_, err = s.Assign(ctx, id, "w1", at)
		must(t, err)
		must(t, s.Complete(ctx, store.Completion{JobID: id, Worker: "w1", CompletionTokens: 1, At: at}))
	}
	if n := bucketLen(t, s, bTokenMinutes); n != 6 {
		t.Errorf("%d minute buckets kept, want 6", n)
	}
}

func TestExpiredNoncesSwept(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "c0.db"))
	defer func() { must(t, s.Close()) }()
	now := t0
	s.now = func() time.Time { return now }
	for i := range 100 {
		must(t, s.UseNonce(ctx, fmt.Sprint("n", i), now.Add(time.Minute)))
	}
	now = now.Add(2 * time.Minute)
	must(t, s.UseNonce(ctx, "fresh", now.Add(time.Minute)))
	if n := bucketLen(t, s, bNonces); n != 100-nonceSweepBatch+1 {
		t.Errorf("%d nonces after one sweep, want %d", n, 100-nonceSweepBatch+1)
	}
	must(t, s.UseNonce(ctx, "fresh2", now.Add(time.Minute)))
	if n, idx := bucketLen(t, s, bNonces), bucketLen(t, s, bNonceExpiry); n != 2 || idx != 2 {
		t.Errorf("%d nonces, %d index entries after two sweeps, want 2, 2", n, idx)
	}
	// A swept nonce can be used again; a live one cannot.
	must(t, s.UseNonce(ctx, "n1", now.Add(time.Minute)))
	if err := s.UseNonce(ctx, "fresh", now.Add(time.Minute)); !errors.Is(err, store.ErrExists) {
		t.Errorf("replay of a live nonce: %v", err)
	}
}

func TestCanceledContext(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "c0.db"))
	defer func() { must(t, s.Close()) }()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.CreateAccount(ctx, store.Account{ID: "a1"}); !errors.Is(err, context.Canceled) {
		t.Errorf("CreateAccount with a canceled context: %v", err)
	}
	if _, err := s.GetAccount(context.Background(), "a1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("account written despite the canceled context: %v", err)
	}
}

func TestCompleteNeedsWorkerAccountToPay(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "c0.db"))
	defer func() { must(t, s.Close()) }()
	seed(t, s, 100)
	w := worker("w1")
	w.AccountID = "no-such-account"
	must(t, s.PutWorker(ctx, w))
	_, err := s.RegisterWorker(ctx, "w1", []string{"m1"}, nil)
	must(t, err)
	_, err = s.Admit(ctx, admitReq("j1", t0, 1))
	must(t, err)
	_, err = s.Assign(ctx, "j1", "w1", t0)
	must(t, err)
	err = s.Complete(ctx, store.Completion{JobID: "j1", Worker: "w1", Earning: 1, At: t0})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Complete paying a missing account: %v, want ErrNotFound", err)
	}
	if j, _ := s.GetJob(ctx, "j1"); j.State != store.JobAssigned {
		t.Errorf("job %s after a failed Complete, want assigned", j.State)
	}
}
