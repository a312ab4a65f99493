package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files and fuzz seed corpora under testdata/")

var (
	keyMu    sync.Mutex
	keyCache = map[int]ed25519.PrivateKey{}
)

// testKey is a fixed key per index, so golden files are stable.
func testKey(i int) ed25519.PrivateKey {
	keyMu.Lock()
	defer keyMu.Unlock()
	if k, ok := keyCache[i]; ok {
		return k
	}
	seed := sha256.Sum256([]byte(fmt.Sprintf("c0mpute-shard-test-key-%d", i)))
	k := ed25519.NewKeyFromSeed(seed[:])
	keyCache[i] = k
	return k
}

// poolShape steers the random pool generator.
type poolShape struct {
	n int // candidates
	// maxStagesHint: nodes hold about layers/hint layers each, so rings
	// need up to about that many stages.
	maxStagesHint int
	sign          bool
	backups       bool
	missingRTT    bool // drop a few RTT measurements
}

// randomInputs makes a plausible pool: nodes at random places on a plane
// (RTT grows with distance, each direction measured with its own noise),
// speeds drawn from a few values (so ties happen), VRAM spread so that
// rings of one to many stages occur, some trusted or staked nodes.
func randomInputs(rng *rand.Rand, s poolShape) Inputs {
	L := 4 + rng.IntN(93)
	layerBytes := int64(100_000_000 + rng.IntN(1_900_000_000))
	kv := int64(rng.IntN(262_144))
	ctx := int64(512 << rng.IntN(7))
	perLayer := layerBytes + kv*ctx
	embed := int64(rng.IntN(3)) * layerBytes
	head := int64(rng.IntN(3)) * layerBytes
	reserve := int64(rng.IntN(2)) * 500_000_000
	coordKey := testKey(0)
	modelKey := testKey(1)
	in := Inputs{}
	in.Model = Model{Name: "test-model", Hash: sha256.Sum256([]byte(fmt.Sprint("model", L, layerBytes))), Layers: L, LayerBytes: layerBytes,
		KVBytesPerToken: kv, EmbedBytes: embed, HeadBytes: head, ActivationBytes: int64(4096 << rng.IntN(3))}
	pin := PinBoundary
	if rng.IntN(5) == 0 {
		pin = PinNone
	}
	hint := max(1, s.maxStagesHint)
	in.Params = Params{Model: in.Model.Hash, Admission: "open", VRAMFloorBytes: perLayer + reserve, ReserveBytes: reserve,
		ContextTokens: ctx, MinStages: 1 + rng.IntN(2), MaxStages: 64, Pinning: pin, PinMinStake: 1_000_000,
		Seed: sha256.Sum256([]byte(fmt.Sprint("seed", rng.Int()))), Time: 1_764_400_000_000}
	if s.backups {
		in.Params.Verifiers = rng.IntN(2)
		in.Params.Standbys = rng.IntN(2)
	}
	// Distinct key indices 2.. for nodes.
	idx := rng.Perm(600)[:s.n]
	type pt struct{ x, y int64 }
	pos := map[PublicKey]pt{}
	var nodes []ed25519.PrivateKey
	for _, i := range idx {
		k := testKey(i + 2)
		nodes = append(nodes, k)
		hold := 1 + rng.IntN(max(1, 2*L/hint))
		vram := reserve + int64(hold)*perLayer + max(embed, head) + int64(rng.IntN(int(perLayer)))
		if rng.IntN(15) == 0 {
			vram = perLayer / 2 // below the floor
		}
		c := Capability{Node: KeyOf(k), Model: in.Model.Hash, VRAMBytes: vram, LayerMicros: int64(100 + 100*rng.IntN(12)),
			UplinkBps: int64(50_000_000 << rng.IntN(8)), Time: 1_764_400_000_000}
		switch rng.IntN(4) {
		case 0:
			c.Trusted = true
		case 1:
			c.Stake = 1_000_000 + int64(rng.IntN(1000))
		case 2:
			c.Stake = int64(rng.IntN(999_999))
		}
		in.Capabilities = append(in.Capabilities, c)
		pos[c.Node] = pt{int64(rng.IntN(100)), int64(rng.IntN(100))}
	}
	coord := KeyOf(coordKey)
	pos[coord] = pt{50, 50}
	all := append([]ed25519.PrivateKey{coordKey}, nodes...)
	for _, k := range all {
		from := KeyOf(k)
		row := RTTRow{From: from, Time: 1_764_400_000_000}
		for _, o := range all {
			to := KeyOf(o)
			if to == from || (s.missingRTT && rng.IntN(30) == 0) {
				continue
			}
			a, b := pos[from], pos[to]
			d := isqrt((a.x-b.x)*(a.x-b.x) + (a.y-b.y)*(a.y-b.y))
			row.Peers = append(row.Peers, RTTPeer{To: to, Micros: 1000 + d*1500 + int64(rng.IntN(3000))})
		}
		in.RTT = append(in.RTT, row)
	}
	if s.sign {
		in.Model.Sign(modelKey)
		in.Params.Sign(coordKey)
		for i := range in.Capabilities {
			in.Capabilities[i].Sign(nodes[i])
		}
		for i := range in.RTT {
			in.RTT[i].Sign(all[i])
		}
	} else {
		in.Model.Publisher = KeyOf(modelKey)
		in.Params.Coordinator = coord
	}
	return in
}

func isqrt(v int64) int64 {
	r := int64(0)
	for (r+1)*(r+1) <= v {
		r++
	}
	return r
}

// shuffled returns the inputs with every set in another order.
func shuffled(rng *rand.Rand, in Inputs) Inputs {
	out := in
	out.Capabilities = append([]Capability(nil), in.Capabilities...)
	rng.Shuffle(len(out.Capabilities), func(i, j int) {
		out.Capabilities[i], out.Capabilities[j] = out.Capabilities[j], out.Capabilities[i]
	})
	out.RTT = make([]RTTRow, len(in.RTT))
	for i, r := range in.RTT {
		r.Peers = append([]RTTPeer(nil), r.Peers...)
		rng.Shuffle(len(r.Peers), func(a, b int) { r.Peers[a], r.Peers[b] = r.Peers[b], r.Peers[a] })
		out.RTT[i] = r
	}
	rng.Shuffle(len(out.RTT), func(i, j int) { out.RTT[i], out.RTT[j] = out.RTT[j], out.RTT[i] })
	return out
}

// planUnchecked plans without signature checks, for property tests that
// run thousands of pools (signatures are covered elsewhere).
func planUnchecked(in Inputs) (Result, error) {
	cfg := newConfig()
	return newPlan(&in, &cfg, in.Hash())
}

// iterations scales a property test's case count: full by default, a
// tenth under -short or the race detector, where the same cases run about
// ten times slower. A tenth still exercises every path for data races;
// the full size is what the properties are claimed at, so CI runs this
// package a second time without -race (scripts/test), and a reduced run
// says so in the test log.
func iterations(t testing.TB, full int) int {
	t.Helper()
	if testing.Short() || raceEnabled {
		n := max(1, full/10)
		t.Logf("%d of %d cases (reduced under -short or -race; the full size runs without them)", n, full)
		return n
	}
	return full
}
