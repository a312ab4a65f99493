package shard

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchInputs is a pool of n candidates for a 70B-class model in fp16
// (80 layers of 1.7 GB, 8K context, GQA KV) on consumer GPUs (24 and
// 32 GB, the headline's RTX 4090 class) spread over a continent, about
// two in five trusted or staked, with a full signed RTT matrix. Rings come
// out at 6–7 stages; from 64 candidates on, every stage gets a standby.
func benchInputs(b testing.TB, n int) Inputs {
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	in := Inputs{}
	in.Model = Model{Name: "llama-3-70b-f16", Hash: sha256.Sum256([]byte("70b")), Layers: 80, LayerBytes: 1_711_276_032,
		KVBytesPerToken: 4096, EmbedBytes: 1_050_673_152, HeadBytes: 1_050_673_152, ActivationBytes: 16384}
	in.Model.Sign(testKey(1))
	in.Params = Params{Model: in.Model.Hash, Admission: "open", VRAMFloorBytes: 16 << 30, ReserveBytes: 1 << 30,
		ContextTokens: 8192, MinStages: 1, MaxStages: 16, Verifiers: 0, Standbys: min(1, n/64), Pinning: PinBoundary,
		PinMinStake: 500_000_000_000, Seed: sha256.Sum256([]byte("bench")), Time: 1_764_400_000_000}
	in.Params.Sign(testKey(0))
	keys := []ed25519.PrivateKey{testKey(0)}
	type pt struct{ x, y int64 }
	pos := []pt{{2000, 1000}}
	for i := range n {
		k := testKey(1000 + i)
		keys = append(keys, k)
		pos = append(pos, pt{int64(rng.IntN(4000)), int64(rng.IntN(2000))})
		vram := []int64{24 << 30, 24 << 30, 24 << 30, 32 << 30}[rng.IntN(4)]
		c := Capability{Model: in.Model.Hash, VRAMBytes: vram, LayerMicros: int64(150 + rng.IntN(400)),
			UplinkBps: int64(100_000_000 * (1 + rng.IntN(20))), Time: 1_764_400_000_000, Trusted: rng.IntN(4) == 0}
		if rng.IntN(4) == 0 {
			c.Stake = 600_000_000_000
		}
		c.Sign(k)
		in.Capabilities = append(in.Capabilities, c)
	}
	for i, k := range keys {
		row := RTTRow{Time: 1_764_400_000_000}
		for j, o := range keys {
			if i != j {
				dx, dy := pos[i].x-pos[j].x, pos[i].y-pos[j].y
				// ~1 ms per 100 km of fibre, round trip, plus noise.
				row.Peers = append(row.Peers, RTTPeer{To: KeyOf(o), Micros: 2000 + isqrt(dx*dx+dy*dy)*20 + int64(rng.IntN(2000))})
			}
		}
		row.Sign(k)
		in.RTT = append(in.RTT, row)
	}
	if _, err := NewPlan(in); err != nil {
		b.Fatalf("bench pool of %d does not plan: %v", n, err)
	}
	return in
}

// BenchmarkPlan: NewPlan end to end (every signature checked), and the
// placement alone on inputs already checked, for 16, 64 and 256
// candidates.
func BenchmarkPlan(b *testing.B) {
	for _, n := range []int{16, 64, 256} {
		in := benchInputs(b, n)
		res, _ := NewPlan(in)
		b.Run(fmt.Sprintf("candidates=%d/full", n), func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				if _, err := NewPlan(in); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
			b.ReportMetric(float64(res.Plan.Stages), "stages")
		})
		b.Run(fmt.Sprintf("candidates=%d/placement", n), func(b *testing.B) {
			cfg := newConfig()
			h := in.Hash()
			start := cpuTime()
			for b.Loop() {
				if _, err := newPlan(&in, &cfg, h); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkRingHeuristic: ordering a ring above the exact limit.
func BenchmarkRingHeuristic(b *testing.B) {
	for _, n := range []int{16, 32, 64} {
		inst := randomTSP(rand.New(rand.NewPCG(1, uint64(n))), n, false)
		b.Run(fmt.Sprintf("stages=%d", n), func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				inst.heuristic()
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkVerify: settling a job, reported per stage.
func BenchmarkVerify(b *testing.B) {
	f := newRingFixture(b)
	job := f.job("job-bench")
	rs := f.receipts(&job)
	b.ReportMetric(float64(len(rs)), "stages")
	start := cpuTime()
	for b.Loop() {
		if v := Verify(&f.plan, &job, rs, DefaultWindow); !v.OK {
			b.Fatal(v.Detail)
		}
	}
	cpu := cpuTime() - start
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(rs)), "µs/stage")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/float64(len(rs)), "cpu-µs/stage")
}

// reportCPU adds CPU milliseconds per operation since start.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
