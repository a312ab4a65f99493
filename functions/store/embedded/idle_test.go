package embedded

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// scanIdle is what IdleWorkers returned before the index: every worker
// record decoded, the idle ones of model kept. The index must agree.
func scanIdle(t testing.TB, s *Store, model string) []string {
	t.Helper()
	ws, err := s.workers(ctx, func(w store.Worker) bool { return idle(w) && w.Serves(model) })
	must(t, err)
	return conns(ws)
}

func conns(ws []store.Worker) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Conn)
	}
	slices.Sort(out)
	return out
}

// indexed is every connection the idle index lists.
func indexed(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	must(t, s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bIdleWorkers).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	}))
	return out
}

// TestIdleIndex drives workers through every change of their record and
// checks after each that IdleWorkers, through the index, lists exactly
// what a scan of every record finds, and that the index holds no other
// connection.
func TestIdleIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c0.db")
	s := open(t, path)
	seed(t, s, 100)
	check := func(step string, want map[string][]string) {
		t.Helper()
		var all []string
		for _, model := range []string{"m1", "m2"} {
			ws, err := s.IdleWorkers(ctx, model)
			must(t, err)
			got := conns(ws)
			if scan := scanIdle(t, s, model); !slices.Equal(got, scan) {
				t.Errorf("%s: IdleWorkers(%s) = %v, a scan finds %v", step, model, got, scan)
			}
			if !slices.Equal(got, want[model]) && !(len(got) == 0 && len(want[model]) == 0) {
				t.Errorf("%s: IdleWorkers(%s) = %v, want %v", step, model, got, want[model])
			}
			all = append(all, got...)
		}
		slices.Sort(all)
		all = slices.Compact(all)
		if ix := indexed(t, s); !slices.Equal(ix, all) && !(len(ix) == 0 && len(all) == 0) {
			t.Errorf("%s: the index lists %v, want %v", step, ix, all)
		}
	}
	for _, conn := range []string{"w1", "w2", "w3", "w4"} {
		must(t, s.PutWorker(ctx, worker(conn)))
	}
	check("connected, not registered", nil)
	for _, conn := range []string{"w1", "w2", "w3"} {
		_, err := s.RegisterWorker(ctx, conn, []string{"m1"}, nil)
		must(t, err)
	}
	_, err := s.RegisterWorker(ctx, "w4", []string{"m1", "m2"}, nil)
	must(t, err)
	check("registered", map[string][]string{"m1": {"w1", "w2", "w3", "w4"}, "m2": {"w4"}})
	for _, id := range []string{"j1", "j2"} {
		_, err := s.Admit(ctx, admitReq(id, t0, 10))
		must(t, err)
	}
	_, err = s.Assign(ctx, "j1", "w1", t0)
	must(t, err)
	_, err = s.Assign(ctx, "j2", "w4", t0)
	must(t, err)
	check("two busy", map[string][]string{"m1": {"w2", "w3"}})
	_, err = s.DrainWorker(ctx, "w2")
	must(t, err)
	check("one draining", map[string][]string{"m1": {"w3"}})
	must(t, s.Complete(ctx, store.Completion{JobID: "j1", Worker: "w1", CompletionTokens: 5, MilliTokPerSec: 40_000, Earning: 7, At: t0}))
	check("completed", map[string][]string{"m1": {"w1", "w3"}})
	_, err = s.Requeue(ctx, "j2", "w4", t0)
	must(t, err)
	check("requeued", map[string][]string{"m1": {"w1", "w3", "w4"}, "m2": {"w4"}})
	_, err = s.Assign(ctx, "j2", "w3", t0)
	must(t, err)
	_, err = s.Fail(ctx, "j2", "worker_lost", true, t0)
	must(t, err)
	check("failed", map[string][]string{"m1": {"w1", "w3", "w4"}, "m2": {"w4"}})
	_, err = s.RegisterWorker(ctx, "w4", []string{"m2"}, nil)
	must(t, err)
	check("registered again", map[string][]string{"m1": {"w1", "w3"}, "m2": {"w4"}})
	_, err = s.DeleteWorker(ctx, "w3")
	must(t, err)
	check("deleted", map[string][]string{"m1": {"w1"}, "m2": {"w4"}})
	must(t, s.Close())
	s = open(t, path)
	defer func() { must(t, s.Close()) }()
	check("reopened", nil)
}

// BenchmarkIdleWorkers reads the idle workers of a model among 200 live
// connections, 10 of them idle (a loaded network): through the index
// ("index", what IdleWorkers does) and by decoding every record ("scan",
// what it did before).
func BenchmarkIdleWorkers(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "c0.db"), WithNoSync(), WithMaxConnsPerToken(math.MaxInt))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { must(b, s.Close()) }()
	seed(b, s, 1<<50)
	for i := range 200 {
		conn := fmt.Sprint("w", i)
		must(b, s.PutWorker(ctx, worker(conn)))
		if _, err := s.RegisterWorker(ctx, conn, []string{"m1"}, nil); err != nil {
			b.Fatal(err)
		}
		if i >= 10 {
			id := fmt.Sprint("j", i)
			if _, err := s.Admit(ctx, admitReq(id, t0, 1)); err != nil {
				b.Fatal(err)
			}
			if _, err := s.Assign(ctx, id, conn, t0); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name string
		read func() int
	}{
		{"index", func() int {
			ws, err := s.IdleWorkers(ctx, "m1")
			must(b, err)
			return len(ws)
		}},
		{"scan", func() int { return len(scanIdle(b, s, "m1")) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if n := c.read(); n != 10 {
					b.Fatalf("%d idle workers, want 10", n)
				}
			}
		})
	}
}
