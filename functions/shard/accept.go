package shard

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"
)

// Errors Accept returns, for errors.Is.
var (
	// ErrPlanMismatch means the plan recomputed from the signed inputs is
	// not the one proposed.
	ErrPlanMismatch = errors.New("shard: plan mismatch")
	// ErrNotMember means the key holds no place in the plan.
	ErrNotMember = errors.New("shard: not a member of the plan")
	// ErrRTTMismatch means a neighbour's measured RTT is outside the
	// tolerance around the matrix's value, or was not measured.
	ErrRTTMismatch = errors.New("shard: rtt to a neighbour does not match the matrix")
)

// Tolerance is how far a member's own probe of a neighbour may be from the
// matrix's RTT: the larger of an absolute margin and a percentage of the
// matrix value. Both are integers, so every member agrees on the bound.
type Tolerance struct {
	AbsMicros int64 `json:"abs_us" validate:"gte=0"`
	Percent   int64 `json:"percent" validate:"gte=0,lte=1000"`
}

// DefaultTolerance allows 5 ms or 25%: RTTs jitter by a few ms on the
// public internet, while a lie that moves a node in the ring is usually
// tens of ms.
var DefaultTolerance = Tolerance{AbsMicros: 5_000, Percent: 25}

func (t Tolerance) allows(matrix, measured int64) bool {
	d := measured - matrix
	if d < 0 {
		d = -d
	}
	return d <= max(t.AbsMicros, matrix*t.Percent/100)
}

// Acceptance is a member's signed agreement to serve its place in a plan.
type Acceptance struct {
	Plan  Hash      `json:"plan"`
	Node  PublicKey `json:"node"`
	Stage int       `json:"stage" validate:"gte=0,lte=65536"`
	Role  Role      `json:"role" validate:"oneof=primary verifier standby"`
	Time  int64     `json:"time_ms" validate:"gt=0"`
	Sig   Signature `json:"sig"`
}

func (a *Acceptance) canonical() []byte {
	e := newEnc(domainAccept)
	e.raw32(a.Plan)
	e.raw32(a.Node)
	e.int(a.Stage)
	e.str(string(a.Role))
	e.i64(a.Time)
	return e.b
}
func (a *Acceptance) signer() PublicKey    { return a.Node }
func (a *Acceptance) signature() Signature { return a.Sig }

// Check validates the fields and the signature.
func (a *Acceptance) Check() error {
	if err := validate.Struct(a); err != nil {
		return fmt.Errorf("%w: acceptance: %v", ErrInvalid, err)
	}
	if a.Node.IsZero() {
		return fmt.Errorf("%w: acceptance: node missing", ErrInvalid)
	}
	return verifySig(a, "acceptance")
}

// DecodeAcceptance parses an acceptance and checks it.
func DecodeAcceptance(b []byte) (Acceptance, error) {
	var a Acceptance
	if err := decodeJSON(b, MaxRecordBytes, &a, "acceptance"); err != nil {
		return Acceptance{}, err
	}
	return a, a.Check()
}

// Accept is a member's verify-and-sign step: it recomputes the plan from
// the signed inputs, requires its hash to be the proposed one, checks its
// own probes of its ring neighbours (measured, µs by node, the coordinator
// included) against the matrix within tol, and only then signs. opts must
// register the same admission policies the coordinator used.
func Accept(key ed25519.PrivateKey, in Inputs, proposed Hash, measured map[PublicKey]int64, tol Tolerance, now time.Time, opts ...Option) (Acceptance, error) {
	res, err := NewPlan(in, opts...)
	if err != nil {
		return Acceptance{}, fmt.Errorf("shard: recompute plan: %w", err)
	}
	if res.Hash != proposed {
		return Acceptance{}, fmt.Errorf("%w: recomputed %s, proposed %s", ErrPlanMismatch, res.Hash, proposed)
	}
	self := KeyOf(key)
	var me *Member
	for i := range res.Plan.Members {
		if res.Plan.Members[i].Node == self {
			me = &res.Plan.Members[i]
		}
	}
	if me == nil {
		return Acceptance{}, fmt.Errorf("%w: %s", ErrNotMember, self)
	}
	rtt := newRTT(in.RTT)
	for _, nb := range []PublicKey{me.Prev, me.Next} {
		want := rtt.get(self, nb)
		got, ok := measured[nb]
		switch {
		case !ok:
			return Acceptance{}, fmt.Errorf("%w: neighbour %s was not probed", ErrRTTMismatch, nb)
		case want >= inf:
			return Acceptance{}, fmt.Errorf("%w: the matrix has no RTT to neighbour %s", ErrRTTMismatch, nb)
		case !tol.allows(want, got):
			return Acceptance{}, fmt.Errorf("%w: neighbour %s measured %d µs, matrix says %d µs (tolerance %d µs or %d%%)",
				ErrRTTMismatch, nb, got, want, tol.AbsMicros, tol.Percent)
		}
	}
	a := Acceptance{Plan: res.Hash, Node: self, Stage: me.Stage, Role: me.Role, Time: now.UnixMilli()}
	a.Sig = sign(key, a.canonical())
	return a, nil
}

// CheckAccepted reports whether every member of plan has signed a valid
// acceptance of it for its own stage and role: the ring may form only then.
func CheckAccepted(plan *Plan, accs []Acceptance) error {
	h := plan.Hash()
	by := make(map[PublicKey]*Acceptance, len(accs))
	for i := range accs {
		a := &accs[i]
		if err := a.Check(); err != nil {
			return err
		}
		if a.Plan != h {
			return fmt.Errorf("%w: %s accepted plan %s, not %s", ErrPlanMismatch, a.Node, a.Plan, h)
		}
		by[a.Node] = a
	}
	for _, m := range plan.Members {
		a, ok := by[m.Node]
		if !ok {
			return fmt.Errorf("%w: %s (stage %d, %s) has not accepted", ErrNotMember, m.Node, m.Stage, m.Role)
		}
		if a.Stage != m.Stage || a.Role != m.Role {
			return fmt.Errorf("%w: %s accepted stage %d as %s, plan has stage %d as %s", ErrPlanMismatch, m.Node, a.Stage, a.Role, m.Stage, m.Role)
		}
	}
	return nil
}
