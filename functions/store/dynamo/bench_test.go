package dynamo_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// The hot-path operations on DynamoDB Local, one caller at a time (the
// latency of one call) and 16 at once (throughput). Run with:
//
//	C0MPUTE_DYNAMODB_ENDPOINT=http://127.0.0.1:8000 go test -run '^$' -bench . ./functions/store/dynamo/
//
// DynamoDB Local is a Java process on the same machine, so these figures
// measure this store's code and the emulator, not AWS's latency (single
// digit milliseconds per call in a region).

// benchSetup prepares a store for n operations: an account rich enough,
// with one key per 16 jobs so the rate limit never binds, n queued jobs
// j0..jn-1, n registered idle workers w0..wn-1; assigned leaves job ji on wi.
func benchSetup(b *testing.B, n int, workers, assigned bool) store.Store {
	s := dynamotest.Store(b)
	if err := s.CreateAccount(bg, store.Account{ID: "a", Credits: 1 << 50, CreatedAt: t0}); err != nil {
		b.Fatal(err)
	}
	if err := s.PutAPIKey(bg, store.Secret{Hash: "kh", ID: "k", AccountID: "a", CreatedAt: t0}); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		if !workers {
			break
		}
		if _, err := s.Admit(bg, admit(fmt.Sprint("j", i))); err != nil {
			b.Fatal(err)
		}
		conn := fmt.Sprint("w", i)
		if err := s.PutWorker(bg, store.Worker{Conn: conn, AccountID: "a", ConnectedAt: t0}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.RegisterWorker(bg, conn, []string{"m"}, nil); err != nil {
			b.Fatal(err)
		}
		if assigned {
			if _, err := s.Assign(bg, fmt.Sprint("j", i), conn, t0); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s
}

func admit(id string) store.AdmitRequest {
	r := req(id)
	r.Limit = 1 << 40
	return r
}

// run measures op serially and with 16 concurrent callers.
func run(b *testing.B, workers, assigned bool, op func(s store.Store, i int) error) {
	for _, par := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", par), func(b *testing.B) {
			s := benchSetup(b, b.N, workers, assigned)
			var next atomic.Int64
			b.SetParallelism(par) // × GOMAXPROCS goroutines; GOMAXPROCS is 2 here
			if par == 1 {
				b.ResetTimer()
				for i := range b.N {
					if err := op(s, i); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := op(s, int(next.Add(1)-1)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}

func BenchmarkAdmit(b *testing.B) {
	run(b, false, false, func(s store.Store, i int) error {
		_, err := s.Admit(bg, admit(fmt.Sprint("new", i)))
		return err
	})
}

func BenchmarkAssign(b *testing.B) {
	run(b, true, false, func(s store.Store, i int) error {
		_, err := s.Assign(bg, fmt.Sprint("j", i), fmt.Sprint("w", i), t0)
		return err
	})
}

func BenchmarkComplete(b *testing.B) {
	run(b, true, true, func(s store.Store, i int) error {
		return s.Complete(bg, store.Completion{JobID: fmt.Sprint("j", i), Worker: fmt.Sprint("w", i),
			CompletionTokens: 100, MilliTokPerSec: 50_000, Earning: 1, At: t0})
	})
}

func BenchmarkFailRefund(b *testing.B) {
	run(b, true, true, func(s store.Store, i int) error {
		_, err := s.Fail(bg, fmt.Sprint("j", i), "worker_lost", true, t0)
		return err
	})
}

func BenchmarkGetAPIKey(b *testing.B) {
	run(b, false, false, func(s store.Store, i int) error {
		_, err := s.GetAPIKey(bg, "kh")
		return err
	})
}
