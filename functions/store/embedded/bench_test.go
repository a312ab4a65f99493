package embedded

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
)

// The hot-path operations, one at a time, with and without fsync per
// commit. Setup always runs without fsync, so that only the measured
// operation pays for durability. Run with:
//
//	go test -run '^$' -bench . ./functions/store/embedded/

// bench runs one operation against a fresh store in both modes: setup
// prepares b.N operations' worth of records, op performs the i-th.
func bench(b *testing.B, setup func(b *testing.B, s *Store), op func(s *Store, i int) error) {
	for _, mode := range []struct {
		name   string
		noSync bool
	}{{"sync", false}, {"nosync", true}} {
		b.Run(mode.name, func(b *testing.B) {
			// Setup connects b.N workers on one token.
			s, err := Open(filepath.Join(b.TempDir(), "c0.db"), WithNoSync(), WithMaxConnsPerToken(math.MaxInt))
			if err != nil {
				b.Fatal(err)
			}
			defer func() { must(b, s.Close()) }()
			seed(b, s, 1<<50)
			if setup != nil {
				setup(b, s)
			}
			s.db.NoSync = mode.noSync
			start := s.db.Stats().TxStats
			b.ResetTimer()
			for i := range b.N {
				if err := op(s, i); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			st := s.db.Stats().TxStats
			b.ReportMetric(float64(st.GetWrite()-start.GetWrite())/float64(b.N), "page-writes/op")
		})
	}
}

var ctx = context.Background()

// queue admits b.N jobs j0..jN-1.
func queue(b *testing.B, s *Store) {
	for i := range b.N {
		if _, err := s.Admit(ctx, admitReq(fmt.Sprint("j", i), t0, 1)); err != nil {
			b.Fatal(err)
		}
	}
}

// queueWithWorkers admits b.N jobs and registers b.N idle workers
// w0..wN-1.
func queueWithWorkers(b *testing.B, s *Store) {
	queue(b, s)
	workers(b, s)
}

// workers registers b.N idle workers w0..wN-1.
func workers(b *testing.B, s *Store) {
	for i := range b.N {
		must(b, s.PutWorker(ctx, worker(fmt.Sprint("w", i))))
		if _, err := s.RegisterWorker(ctx, fmt.Sprint("w", i), []string{"m1"}, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// assigned leaves job ji assigned to worker wi, for every i < b.N.
func assigned(b *testing.B, s *Store) {
	queueWithWorkers(b, s)
	for i := range b.N {
		if _, err := s.Assign(ctx, fmt.Sprint("j", i), fmt.Sprint("w", i), t0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAdmit(b *testing.B) {
	bench(b, nil, func(s *Store, i int) error {
		_, err := s.Admit(ctx, admitReq(fmt.Sprint("j", i), t0, 1))
		return err
	})
}

func BenchmarkAssign(b *testing.B) {
	bench(b, queueWithWorkers, func(s *Store, i int) error {
		_, err := s.Assign(ctx, fmt.Sprint("j", i), fmt.Sprint("w", i), t0)
		return err
	})
}

// BenchmarkAdmitAssign is the request path's one write when a worker is
// idle (Dispatcher.Admit): BenchmarkAdmit and BenchmarkAssign in one
// transaction.
func BenchmarkAdmitAssign(b *testing.B) {
	bench(b, workers, func(s *Store, i int) error {
		_, ok, err := s.AdmitAssign(ctx, admitReq(fmt.Sprint("j", i), t0, 1), fmt.Sprint("w", i))
		if err == nil && !ok {
			err = fmt.Errorf("job j%d not assigned", i)
		}
		return err
	})
}

func BenchmarkComplete(b *testing.B) {
	bench(b, assigned, func(s *Store, i int) error {
		return s.Complete(ctx, store.Completion{
			JobID: fmt.Sprint("j", i), Worker: fmt.Sprint("w", i),
			CompletionTokens: 100, MilliTokPerSec: 50_000, Earning: 1, At: t0,
		})
	})
}

func BenchmarkFailRefund(b *testing.B) {
	bench(b, assigned, func(s *Store, i int) error {
		_, err := s.Fail(ctx, fmt.Sprint("j", i), "worker_lost", true, t0)
		return err
	})
}
