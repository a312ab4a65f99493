package embedded

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// dump is every key and value of every bucket of s.
func dump(t *testing.T, s *Store) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	must(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			kv := map[string]string{}
			out[string(name)] = kv
			return b.ForEach(func(k, v []byte) error {
				kv[string(k)] = string(v)
				return nil
			})
		})
	}))
	return out
}

// TestAdmitAssignIsAdmitThenAssign: AdmitAssign leaves the store exactly as
// Admit followed by Assign does when the worker can take the job, exactly
// as Admit alone does when it cannot, and untouched when the admission
// fails; two stores set up alike, one driven each way, are compared bucket
// by bucket, key by key.
func TestAdmitAssignIsAdmitThenAssign(t *testing.T) {
	ctx := context.Background()
	idle := func(t *testing.T, s *Store, conn string, models ...string) {
		must(t, s.PutWorker(ctx, worker(conn)))
		_, err := s.RegisterWorker(ctx, conn, models, nil)
		must(t, err)
	}
	for _, c := range []struct {
		name     string
		setup    func(t *testing.T, s *Store)
		worker   string
		price    int64
		assigned bool
		err      error
	}{
		{name: "idle worker", setup: func(t *testing.T, s *Store) { idle(t, s, "w1", "m1") }, worker: "w1", price: 3, assigned: true},
		{name: "free job, idle worker", setup: func(t *testing.T, s *Store) { idle(t, s, "w1", "m1") }, worker: "w1", price: 0, assigned: true},
		{name: "worker busy", setup: func(t *testing.T, s *Store) {
			idle(t, s, "w1", "m1")
			_, err := s.Admit(ctx, admitReq("j0", t0, 1))
			must(t, err)
			_, err = s.Assign(ctx, "j0", "w1", t0)
			must(t, err)
		}, worker: "w1", price: 3},
		{name: "worker unknown", worker: "w9", price: 3},
		{name: "worker connected, not registered", setup: func(t *testing.T, s *Store) { must(t, s.PutWorker(ctx, worker("w1"))) }, worker: "w1", price: 3},
		{name: "worker draining", setup: func(t *testing.T, s *Store) {
			idle(t, s, "w1", "m1")
			_, err := s.DrainWorker(ctx, "w1")
			must(t, err)
		}, worker: "w1", price: 3},
		{name: "worker serves another model", setup: func(t *testing.T, s *Store) { idle(t, s, "w1", "m2") }, worker: "w1", price: 3},
		{name: "not enough credits", setup: func(t *testing.T, s *Store) { idle(t, s, "w1", "m1") }, worker: "w1", price: 11, err: store.ErrInsufficientCredits},
		{name: "job id taken", setup: func(t *testing.T, s *Store) {
			idle(t, s, "w1", "m1")
			_, err := s.Admit(ctx, admitReq("j1", t0, 1))
			must(t, err)
		}, worker: "w1", price: 3, err: store.ErrExists},
	} {
		t.Run(c.name, func(t *testing.T) {
			ref, got := open(t, filepath.Join(t.TempDir(), "ref.db")), open(t, filepath.Join(t.TempDir(), "got.db"))
			defer ref.Close()
			defer got.Close()
			for _, s := range []*Store{ref, got} {
				s.now = func() time.Time { return t0 }
				seed(t, s, 10)
				if c.setup != nil {
					c.setup(t, s)
				}
			}
			before := dump(t, got)
			r := admitReq("j1", t0, c.price)

			adm, assigned, err := got.AdmitAssign(ctx, r, c.worker)
			if !errors.Is(err, c.err) || assigned != c.assigned {
				t.Fatalf("AdmitAssign: assigned %v, err %v; want %v, %v", assigned, err, c.assigned, c.err)
			}
			if c.err != nil {
				if after := dump(t, got); !maps.EqualFunc(before, after, maps.Equal) {
					t.Fatal("a refused admission changed the store")
				}
				return
			}
			want, err := ref.Admit(ctx, r)
			must(t, err)
			if c.assigned {
				job, err := ref.Assign(ctx, "j1", c.worker, t0)
				must(t, err)
				want.Job = job
			}
			if adm != want {
				t.Errorf("admission\n got %+v\nwant %+v", adm, want)
			}
			if state := map[bool]store.JobState{true: store.JobAssigned, false: store.JobQueued}[c.assigned]; adm.Job.State != state {
				t.Errorf("job is %s, want %s", adm.Job.State, state)
			}
			w, r2 := dump(t, ref), dump(t, got)
			for name := range w {
				if !maps.Equal(w[name], r2[name]) {
					t.Errorf("bucket %s differs:\n got %q\nwant %q", name, r2[name], w[name])
				}
			}
			if len(w) != len(r2) {
				t.Errorf("%d buckets, want %d", len(r2), len(w))
			}
		})
	}
}
