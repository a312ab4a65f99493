package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"
)

// ringFixture is a signed pool, its plan (three stages or more) and every
// member's key.
type ringFixture struct {
	in    Inputs
	plan  Plan
	keys  map[PublicKey]ed25519.PrivateKey
	coord ed25519.PrivateKey
}

func newRingFixture(t testing.TB) *ringFixture {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	for {
		in := randomInputs(rng, poolShape{n: 12, maxStagesHint: 5, sign: true, backups: true})
		res, err := NewPlan(in)
		if err != nil || res.Plan.Stages < 3 {
			continue
		}
		f := &ringFixture{in: in, plan: res.Plan, keys: map[PublicKey]ed25519.PrivateKey{}, coord: testKey(0)}
		for i := 2; i < 602; i++ {
			f.keys[KeyOf(testKey(i))] = testKey(i)
		}
		return f
	}
}

var (
	blockTime = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	jobSlot   = uint64(380_000_000)
)

func (f *ringFixture) job(id string) Job {
	j := Job{ID: id, Plan: f.plan.Hash(), Model: f.plan.Model, Nonce: sha256.Sum256([]byte("nonce " + id)),
		Input: sha256.Sum256([]byte("input " + id)), TokenStart: 10, TokenEnd: 42, Slot: jobSlot,
		Time: blockTime.UnixMilli(), Earnings: 1_000_003}
	// The output is the chain's end: each stage hashes what it got.
	h := j.Input
	for range f.plan.Stages {
		h = sha256.Sum256(h[:])
	}
	j.Output = h
	j.Sign(f.coord)
	return j
}

func (f *ringFixture) receipts(j *Job) []Receipt {
	var rs []Receipt
	in := j.Input
	for s := range f.plan.Stages {
		m, _ := f.plan.Primary(s)
		out := sha256.Sum256(in[:])
		r := Receipt{Job: j.ID, Plan: j.Plan, Stage: s, LayerStart: m.LayerStart, LayerEnd: m.LayerEnd, Model: j.Model,
			Input: in, Output: out, TokenStart: j.TokenStart, TokenEnd: j.TokenEnd, Nonce: j.Nonce,
			Slot: j.Slot + uint64(s), Blockhash: blockhashOf(j.Slot + uint64(s)), Time: j.Time + int64(1000*s)}
		r.Sign(f.keys[m.Node])
		rs = append(rs, r)
		in = out
	}
	return rs
}

func blockhashOf(slot uint64) Blockhash {
	return Blockhash(sha256.Sum256([]byte{byte(slot), byte(slot >> 8), byte(slot >> 16), byte(slot >> 24)}))
}

type blockMap map[uint64]Blockhash

func (b blockMap) Blockhash(slot uint64) (Blockhash, bool) { h, ok := b[slot]; return h, ok }

// TestVerifyRejects: one failing receipt set per check, each rejected
// with its own reason; the untouched set is paid.
func TestVerifyRejects(t *testing.T) {
	f := newRingFixture(t)
	job := f.job("job-A")
	other := f.job("job-B")
	resign := func(r *Receipt, key ed25519.PrivateKey) { r.Sign(key) }
	keyOf := func(s int) ed25519.PrivateKey { m, _ := f.plan.Primary(s); return f.keys[m.Node] }
	blocks := blockMap{}
	for s := range uint64(10) {
		blocks[jobSlot+s] = blockhashOf(jobSlot + s)
	}
	cases := []struct {
		name   string
		job    func(*Job)
		mutate func([]Receipt) []Receipt
		window func(*Window)
		want   Reason
	}{
		{name: "valid", want: ReasonOK},
		{name: "forged signature", mutate: func(rs []Receipt) []Receipt { rs[1].Sig[5] ^= 1; return rs }, want: ReasonBadSignature},
		{name: "forged field", mutate: func(rs []Receipt) []Receipt { rs[1].Output[0] ^= 1; return rs }, want: ReasonBadSignature},
		{name: "wrong signer", mutate: func(rs []Receipt) []Receipt { resign(&rs[1], keyOf(2)); return rs }, want: ReasonWrongSigner},
		{name: "signed by a standby or outsider", mutate: func(rs []Receipt) []Receipt { resign(&rs[0], testKey(9999)); return rs }, want: ReasonWrongSigner},
		{name: "gap", mutate: func(rs []Receipt) []Receipt { return append(rs[:1], rs[2:]...) }, want: ReasonGap},
		{name: "missing tail", mutate: func(rs []Receipt) []Receipt { return rs[:len(rs)-1] }, want: ReasonGap},
		{name: "overlap", mutate: func(rs []Receipt) []Receipt { rs[0].LayerEnd++; resign(&rs[0], keyOf(0)); return rs }, want: ReasonOverlap},
		{name: "duplicate receipt", mutate: func(rs []Receipt) []Receipt { return append(rs, rs[1]) }, want: ReasonOverlap},
		{name: "shifted boundary", mutate: func(rs []Receipt) []Receipt {
			rs[0].LayerEnd++
			rs[1].LayerStart++
			if rs[1].LayerStart == rs[1].LayerEnd {
				rs[0].LayerEnd -= 2
				rs[1].LayerStart -= 2
			}
			resign(&rs[0], keyOf(0))
			resign(&rs[1], keyOf(1))
			return rs
		}, want: ReasonRangeMismatch},
		{name: "stale nonce", mutate: func(rs []Receipt) []Receipt { rs[2].Nonce = other.Nonce; resign(&rs[2], keyOf(2)); return rs }, want: ReasonStaleNonce},
		{name: "other tokens", mutate: func(rs []Receipt) []Receipt { rs[1].TokenEnd++; resign(&rs[1], keyOf(1)); return rs }, want: ReasonTokenMismatch},
		{name: "broken chain", mutate: func(rs []Receipt) []Receipt { rs[2].Input[0] ^= 1; resign(&rs[2], keyOf(2)); return rs }, want: ReasonBrokenChain},
		{name: "chain off the coordinator's input", mutate: func(rs []Receipt) []Receipt {
			rs[0].Input[0] ^= 1
			resign(&rs[0], keyOf(0))
			return rs
		}, want: ReasonBrokenChain},
		{name: "output not what the coordinator got", job: func(j *Job) { j.Output[0] ^= 1; j.Sign(f.coord) }, want: ReasonBrokenChain},
		{name: "block before the window", mutate: func(rs []Receipt) []Receipt { rs[1].Slot = jobSlot - 151; resign(&rs[1], keyOf(1)); return rs }, want: ReasonBlockWindow},
		{name: "block after the window", mutate: func(rs []Receipt) []Receipt { rs[1].Slot = jobSlot + 9001; resign(&rs[1], keyOf(1)); return rs }, want: ReasonBlockWindow},
		{name: "blockhash not the slot's", mutate: func(rs []Receipt) []Receipt {
			rs[1].Blockhash[0] ^= 1
			resign(&rs[1], keyOf(1))
			return rs
		}, window: func(w *Window) { w.Blocks = blocks }, want: ReasonUnknownBlock},
		{name: "known blockhashes pass", window: func(w *Window) { w.Blocks = blocks }, want: ReasonOK},
		{name: "dated too late", mutate: func(rs []Receipt) []Receipt { rs[1].Time += 2 * 3600_000; resign(&rs[1], keyOf(1)); return rs }, want: ReasonTimeWindow},
		{name: "replay of another job", mutate: func([]Receipt) []Receipt { return f.receipts(&other) }, want: ReasonWrongJob},
		{name: "receipt for another plan", mutate: func(rs []Receipt) []Receipt { rs[0].Plan[0] ^= 1; resign(&rs[0], keyOf(0)); return rs }, want: ReasonPlanMismatch},
		{name: "receipt for another model", mutate: func(rs []Receipt) []Receipt { rs[0].Model[0] ^= 1; resign(&rs[0], keyOf(0)); return rs }, want: ReasonModelMismatch},
		{name: "job for another plan", job: func(j *Job) { j.Plan[0] ^= 1; j.Sign(f.coord) }, want: ReasonPlanMismatch},
		{name: "job signed by someone else", job: func(j *Job) { j.Sign(testKey(9999)) }, want: ReasonWrongSigner},
		{name: "forged job", job: func(j *Job) { j.Earnings *= 10 }, want: ReasonBadSignature},
		{name: "no receipts", mutate: func([]Receipt) []Receipt { return nil }, want: ReasonGap},
		{name: "malformed receipt", mutate: func(rs []Receipt) []Receipt { rs[0].Job = ""; return rs }, want: ReasonMalformed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := job
			if c.job != nil {
				c.job(&j)
			}
			rs := f.receipts(&job)
			if c.mutate != nil {
				rs = c.mutate(rs)
			}
			w := DefaultWindow
			if c.window != nil {
				c.window(&w)
			}
			v := Verify(&f.plan, &j, rs, w)
			if v.Reason != c.want {
				t.Fatalf("reason %q (%s), want %q", v.Reason, v.Detail, c.want)
			}
			if v.OK != (c.want == ReasonOK) || (v.OK && v.Err() != nil) {
				t.Fatalf("OK=%v for reason %q", v.OK, v.Reason)
			}
			if !v.OK {
				var re *RejectedError
				if !errors.As(v.Err(), &re) || re.Reason != c.want || len(v.Shares) != 0 {
					t.Fatalf("rejection not typed or pays someone: %v %v", v.Err(), v.Shares)
				}
				return
			}
			var sum int64
			for i, s := range v.Shares {
				m, _ := f.plan.Primary(i)
				if s.Stage != i || s.Node != m.Node || s.Layers != m.LayerEnd-m.LayerStart || s.Tokens != 32 {
					t.Fatalf("share %d = %+v, plan member %+v", i, s, m)
				}
				sum += s.Amount
			}
			if sum != j.Earnings {
				t.Fatalf("shares sum to %d, earnings %d", sum, j.Earnings)
			}
		})
	}
}

// TestSplit: integer shares by layers × tokens, remainder to the largest
// fractional parts, then the lower stage.
func TestSplit(t *testing.T) {
	mk := func(layers ...int) []*Receipt {
		var rs []*Receipt
		start := 0
		for i, l := range layers {
			rs = append(rs, &Receipt{Stage: i, LayerStart: start, LayerEnd: start + l, TokenStart: 0, TokenEnd: 10})
			start += l
		}
		return rs
	}
	cases := []struct {
		earnings int64
		layers   []int
		want     []int64
	}{
		{100, []int{1, 1, 1}, []int64{34, 33, 33}},
		{2, []int{1, 1, 1}, []int64{1, 1, 0}},
		{0, []int{5, 3}, []int64{0, 0}},
		{10, []int{3, 7}, []int64{3, 7}},
		{11, []int{3, 7}, []int64{3, 8}}, // 3.3 / 7.7: the .7 gets the unit
		{7, []int{10, 20, 40}, []int64{1, 2, 4}},
		{math.MaxInt64, []int{1, 1}, []int64{math.MaxInt64/2 + 1, math.MaxInt64 / 2}},
	}
	for _, c := range cases {
		got, err := split(c.earnings, mk(c.layers...))
		if err != nil {
			t.Fatal(err)
		}
		for i := range c.want {
			if got[i].Amount != c.want[i] {
				t.Fatalf("split(%d, %v) = %+v, want %v", c.earnings, c.layers, got, c.want)
			}
		}
	}
	// Random splits: the sum is exact and every share is within one unit
	// of its exact rational share (checked with big integers).
	rng := rand.New(rand.NewPCG(1, 1))
	for range iterations(t, 5000) {
		n := 1 + rng.IntN(20)
		layers := make([]int, n)
		for i := range layers {
			layers[i] = 1 + rng.IntN(200)
		}
		rs := mk(layers...)
		for _, r := range rs {
			r.TokenEnd = int64(1 + rng.IntN(100000))
		}
		e := rng.Int64()
		if rng.IntN(2) == 0 {
			e = rng.Int64N(1000)
		}
		got, err := split(e, rs)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		total := new(big.Int)
		for _, s := range got {
			total.Add(total, big.NewInt(int64(s.Layers)*s.Tokens))
		}
		for _, s := range got {
			sum += s.Amount
			exact := new(big.Int).Mul(big.NewInt(e), big.NewInt(int64(s.Layers)*s.Tokens))
			exact.Quo(exact, total)
			d := new(big.Int).Sub(big.NewInt(s.Amount), exact).Int64()
			if d < 0 || d > 1 {
				t.Fatalf("share %d, floor of exact %s", s.Amount, exact)
			}
		}
		if sum != e {
			t.Fatalf("shares sum to %d, want %d", sum, e)
		}
	}
}
