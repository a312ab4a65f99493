package shard

import (
	"errors"
	"testing"
	"time"
)

func (f *ringFixture) probes(self PublicKey, skew int64) map[PublicKey]int64 {
	rtt := newRTT(f.in.RTT)
	out := map[PublicKey]int64{}
	for _, m := range f.plan.Members {
		if m.Node == self {
			out[m.Prev] = rtt.get(self, m.Prev) + skew
			out[m.Next] = rtt.get(self, m.Next) + skew
		}
	}
	return out
}

func TestAccept(t *testing.T) {
	f := newRingFixture(t)
	h := f.plan.Hash()
	now := time.Unix(1_764_400_000, 0)
	var accs []Acceptance
	for _, m := range f.plan.Members {
		a, err := Accept(f.keys[m.Node], f.in, h, f.probes(m.Node, 4_000), DefaultTolerance, now)
		if err != nil {
			t.Fatalf("member %s: %v", m.Node, err)
		}
		if a.Stage != m.Stage || a.Role != m.Role || a.Plan != h || a.Check() != nil {
			t.Fatalf("acceptance %+v for member %+v", a, m)
		}
		accs = append(accs, a)
	}
	if err := CheckAccepted(&f.plan, accs); err != nil {
		t.Fatal(err)
	}
	if err := CheckAccepted(&f.plan, accs[1:]); !errors.Is(err, ErrNotMember) {
		t.Fatalf("missing acceptance: %v", err)
	}
	forged := append([]Acceptance(nil), accs...)
	forged[0].Time++
	if err := CheckAccepted(&f.plan, forged); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("forged acceptance: %v", err)
	}

	primary, _ := f.plan.Primary(1)
	key := f.keys[primary.Node]
	other := h
	other[0] ^= 1
	t.Run("plan mismatch", func(t *testing.T) {
		if _, err := Accept(key, f.in, other, f.probes(primary.Node, 0), DefaultTolerance, now); !errors.Is(err, ErrPlanMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("altered inputs", func(t *testing.T) {
		in := f.in
		in.Params.Seed[0] ^= 1
		in.Params.Sign(f.coord) // a validly signed but different input set
		if _, err := Accept(key, in, h, f.probes(primary.Node, 0), DefaultTolerance, now); !errors.Is(err, ErrPlanMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not a member", func(t *testing.T) {
		if _, err := Accept(testKey(9999), f.in, h, nil, DefaultTolerance, now); !errors.Is(err, ErrNotMember) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("neighbour farther than the matrix says", func(t *testing.T) {
		if _, err := Accept(key, f.in, h, f.probes(primary.Node, 60_000), DefaultTolerance, now); !errors.Is(err, ErrRTTMismatch) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("neighbour not probed", func(t *testing.T) {
		p := f.probes(primary.Node, 0)
		delete(p, primary.Next)
		if _, err := Accept(key, f.in, h, p, DefaultTolerance, now); !errors.Is(err, ErrRTTMismatch) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestToleranceAllows(t *testing.T) {
	tol := Tolerance{AbsMicros: 5000, Percent: 25}
	cases := []struct {
		matrix, measured int64
		want             bool
	}{
		{10_000, 15_000, true}, {10_000, 15_001, false}, {10_000, 5_000, true}, {10_000, 4_999, false},
		{100_000, 125_000, true}, {100_000, 125_001, false}, {100_000, 75_000, true},
	}
	for _, c := range cases {
		if got := tol.allows(c.matrix, c.measured); got != c.want {
			t.Errorf("allows(%d, %d) = %v", c.matrix, c.measured, got)
		}
	}
}
