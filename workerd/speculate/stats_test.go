package speculate_test

import (
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

func TestStatsObserve(t *testing.T) {
	var s speculate.Stats
	s.Observe(0, 0, 10*time.Millisecond, 0)                              // a plain step
	s.Observe(4, 4, 20*time.Millisecond, time.Millisecond)               // all accepted
	s.Observe(4, 1, 30*time.Millisecond, 2*time.Millisecond)             // one rejection
	s.Observe(speculate.MaxGamma+5, 0, 40*time.Millisecond, time.Second) // counted at MaxGamma
	for _, c := range []struct {
		name      string
		got, want int64
	}{
		{"Loops", s.Loops.Load(), 4},
		{"ByGamma[0]", s.ByGamma[0].Load(), 1},
		{"ByGamma[4]", s.ByGamma[4].Load(), 2},
		{"ByGamma[MaxGamma]", s.ByGamma[speculate.MaxGamma].Load(), 1},
		{"Drafted", s.Drafted.Load(), 0 + 4 + 4 + speculate.MaxGamma + 5},
		{"Accepted", s.Accepted.Load(), 5},
		{"Rejections", s.Rejections.Load(), 2},
		{"LoopNanos", s.LoopNanos.Load(), int64(100 * time.Millisecond)},
		{"DraftNanos", s.DraftNanos.Load(), int64(time.Second + 3*time.Millisecond)},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	var sum int64
	for i := range s.ByGamma {
		sum += s.ByGamma[i].Load()
	}
	if sum != s.Loops.Load() {
		t.Errorf("ByGamma sums to %d, Loops is %d", sum, s.Loops.Load())
	}
}

// Observe is safe from several goroutines (a metrics scrape reads while
// the driver writes).
func TestStatsConcurrent(t *testing.T) {
	var s speculate.Stats
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				s.Observe(g, g/2, time.Microsecond, 0)
				_ = s.Loops.Load()
			}
		}()
	}
	wg.Wait()
	if s.Loops.Load() != 4000 || s.Drafted.Load() != 6000 || s.Accepted.Load() != 2000 || s.Rejections.Load() != 3000 {
		t.Fatalf("loops %d drafted %d accepted %d rejections %d, want 4000 6000 2000 3000",
			s.Loops.Load(), s.Drafted.Load(), s.Accepted.Load(), s.Rejections.Load())
	}
}
