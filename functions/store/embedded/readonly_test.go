package embedded

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// TestReadOnly: a read-only open reads what a read-write one wrote, refuses
// every write, leaves the file byte for byte as it was (a queued job and a
// live worker, which a read-write open would fail and forget, stay), and
// creates nothing where there is no store.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "c0.db")

	missing := filepath.Join(dir, "missing.db")
	if _, err := Open(missing, ReadOnly()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only open of a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a read-only open created %s: %v", missing, err)
	}

	s := open(t, path)
	seed(t, s, 100)
	_, err := s.Admit(ctx, admitReq("queued", t0, 10))
	must(t, err)
	must(t, s.PutWorker(ctx, worker("w1")))
	must(t, s.Close())
	before, err := os.ReadFile(path)
	must(t, err)
	stat, err := os.Stat(path)
	must(t, err)

	ro, err := Open(path, ReadOnly())
	must(t, err)
	// Readers share the file.
	ro2, err := Open(path, ReadOnly())
	must(t, err)
	must(t, ro2.Close())
	if a, err := ro.GetAccount(ctx, "a1"); err != nil || a.Credits != 90 {
		t.Errorf("account a1: %+v, %v; want 90 credits", a, err)
	}
	if j, err := ro.GetJob(ctx, "queued"); err != nil || j.State != store.JobQueued {
		t.Errorf("queued job: %+v, %v; want it still queued", j, err)
	}
	if v, err := ro.Carry(ctx, "never_written"); err != nil || v != 0 {
		t.Errorf("carry never written: %d, %v", v, err)
	}
	if _, err := ro.GetRun(ctx, "rewards/2031-03-14"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("run in a store without a ledger: %v, want ErrNotFound", err)
	}
	for name, write := range map[string]func() error{
		"create account": func() error { return ro.CreateAccount(ctx, store.Account{ID: "a2"}) },
		"start run":      func() error { _, _, err := ro.StartRun(ctx, store.KeeperRun{ID: "r", Created: t0}); return err },
		"grant":          func() error { _, err := ro.Grant(ctx, "a1", 5, "g", false); return err },
	} {
		if err := write(); !errors.Is(err, bolt.ErrDatabaseReadOnly) {
			t.Errorf("%s on a read-only store: %v, want ErrDatabaseReadOnly", name, err)
		}
	}
	must(t, ro.Close())

	after, err := os.ReadFile(path)
	must(t, err)
	stat2, err := os.Stat(path)
	must(t, err)
	if !bytes.Equal(before, after) || !stat2.ModTime().Equal(stat.ModTime()) {
		t.Error("a read-only open changed the file")
	}
}

// TestReadOnlyRefusesWhatIsNotAStore: a bolt file without the store's
// buckets is refused, not read with missing buckets.
func TestReadOnlyRefusesWhatIsNotAStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	must(t, err)
	must(t, db.Close())
	if _, err := Open(path, ReadOnly()); err == nil || !strings.Contains(err.Error(), "not a c0mpute store") {
		t.Fatalf("read-only open of a bolt file without buckets: %v", err)
	}
}

// TestOpenHeldByAnotherWriter: a store held open for writing is refused
// after a short wait, with a message that says why.
func TestOpenHeldByAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c0.db")
	s := open(t, path)
	defer func() { must(t, s.Close()) }()
	_, err := Open(path, ReadOnly())
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "a running gateway or keeper") {
		t.Fatalf("read-only open of a held store: %v", err)
	}
}
