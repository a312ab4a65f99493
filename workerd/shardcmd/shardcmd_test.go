package shardcmd

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/shard"
)

func key(i int) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte(fmt.Sprint("shardcmd-test-", i)))
	return ed25519.NewKeyFromSeed(seed[:])
}

// writeKey stores a key as a Solana keypair file (a JSON array of bytes).
func writeKey(t *testing.T, dir string, k ed25519.PrivateKey) string {
	ints := make([]int, len(k))
	for i, b := range k {
		ints[i] = int(b)
	}
	b, _ := json.Marshal(ints)
	path := filepath.Join(dir, shard.KeyOf(k).String()+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// pool is a signed four-node pool for a 12-layer model: two trusted nodes
// that can hold the ends, two larger untrusted ones for the middle.
func pool(t *testing.T) (shard.Inputs, []ed25519.PrivateKey) {
	in := shard.Inputs{
		Model: shard.Model{Name: "tiny-12", Hash: sha256.Sum256([]byte("tiny")), Layers: 12, LayerBytes: 1 << 30,
			KVBytesPerToken: 1024, EmbedBytes: 1 << 29, HeadBytes: 1 << 29, ActivationBytes: 8192},
	}
	in.Model.Sign(key(1))
	in.Params = shard.Params{Model: in.Model.Hash, Admission: "open", VRAMFloorBytes: 4 << 30, ContextTokens: 4096,
		MinStages: 1, MaxStages: 8, Pinning: shard.PinBoundary, PinMinStake: 1_000_000, Seed: sha256.Sum256([]byte("seed")), Time: 1}
	in.Params.Sign(key(0))
	nodes := []ed25519.PrivateKey{key(10), key(11), key(12), key(13)}
	vram := []int64{5 << 30, 5 << 30, 8 << 30, 8 << 30}
	for i, k := range nodes {
		c := shard.Capability{Model: in.Model.Hash, VRAMBytes: vram[i], LayerMicros: int64(300 + 50*i), UplinkBps: 1e9, Time: 1, Trusted: i < 2}
		c.Sign(k)
		in.Capabilities = append(in.Capabilities, c)
	}
	all := append([]ed25519.PrivateKey{key(0)}, nodes...)
	for i, a := range all {
		row := shard.RTTRow{Time: 1}
		for j, b := range all {
			if i != j {
				row.Peers = append(row.Peers, shard.RTTPeer{To: shard.KeyOf(b), Micros: int64(5000 + 1000*(i+j))})
			}
		}
		row.Sign(a)
		in.RTT = append(in.RTT, row)
	}
	return in, nodes
}

func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Now: func() time.Time { return time.Unix(1_764_400_000, 0) }})
	return code, out.String(), errb.String()
}

func writeJSON(t *testing.T, dir, name string, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlanAcceptVerify walks the CLI through a ring's life: plan, every
// member accepts, receipts verify and earnings split; then a forged
// receipt is rejected with exit code 1 and its reason.
func TestPlanAcceptVerify(t *testing.T) {
	dir := t.TempDir()
	in, nodes := pool(t)
	poolPath := writeJSON(t, dir, "pool.json", in)

	code, out, errOut := run(t, "", "plan", "-in", poolPath)
	if code != ExitOK {
		t.Fatalf("plan exit %d: %s", code, errOut)
	}
	plan, err := shard.DecodePlan([]byte(out))
	if err != nil {
		t.Fatalf("plan output does not decode: %v\n%s", err, out)
	}
	if !strings.Contains(errOut, "stages") {
		t.Fatalf("no summary on stderr: %q", errOut)
	}
	// Same pool through stdin, same bytes.
	poolBytes, _ := os.ReadFile(poolPath)
	if code, out2, _ := run(t, string(poolBytes), "plan", "-in", "-"); code != ExitOK || out2 != out {
		t.Fatal("plan from stdin differs")
	}
	planPath := filepath.Join(dir, "plan.json")
	if code, _, e := run(t, "", "plan", "-in", poolPath, "-out", planPath); code != ExitOK {
		t.Fatal(e)
	}

	keys := map[shard.PublicKey]ed25519.PrivateKey{}
	for _, k := range nodes {
		keys[shard.KeyOf(k)] = k
	}
	rttOf := func(a, b shard.PublicKey) int64 {
		for _, r := range in.RTT {
			if r.From == a {
				for _, p := range r.Peers {
					if p.To == b {
						return p.Micros
					}
				}
			}
		}
		return 0
	}
	for _, m := range plan.Members {
		probes := map[shard.PublicKey]int64{m.Prev: rttOf(m.Node, m.Prev) + 1000, m.Next: rttOf(m.Node, m.Next)}
		probePath := writeJSON(t, dir, "probes.json", probes)
		code, out, e := run(t, "", "accept", "-in", poolPath, "-plan", planPath, "-probes", probePath, "-key", writeKey(t, dir, keys[m.Node]))
		if code != ExitOK {
			t.Fatalf("accept %s: exit %d: %s", m.Node, code, e)
		}
		acc, err := shard.DecodeAcceptance([]byte(out))
		if err != nil || acc.Stage != m.Stage || acc.Plan != plan.Hash() {
			t.Fatalf("acceptance %s: %v", out, err)
		}
		// A neighbour 50 ms away from what the matrix says: refused.
		probes[m.Next] += 50_000
		writeJSON(t, dir, "probes.json", probes)
		if code, _, e := run(t, "", "accept", "-in", poolPath, "-plan", planPath, "-probes", probePath, "-key", writeKey(t, dir, keys[m.Node])); code != ExitRejected || !strings.Contains(e, "rtt") {
			t.Fatalf("bad probe accepted: %d %s", code, e)
		}
	}

	job := shard.Job{ID: "job-1", Plan: plan.Hash(), Model: plan.Model, Nonce: sha256.Sum256([]byte("n")), Input: sha256.Sum256([]byte("in")),
		TokenStart: 0, TokenEnd: 100, Slot: 1000, Time: 1_764_400_000_000, Earnings: 7001}
	var receipts []shard.Receipt
	h := job.Input
	for s := range plan.Stages {
		m, _ := plan.Primary(s)
		r := shard.Receipt{Job: job.ID, Plan: job.Plan, Stage: s, LayerStart: m.LayerStart, LayerEnd: m.LayerEnd, Model: job.Model,
			Input: h, TokenStart: 0, TokenEnd: 100, Nonce: job.Nonce, Slot: 1001, Time: job.Time + 500}
		r.Output = sha256.Sum256(h[:])
		h = r.Output
		r.Sign(keys[m.Node])
		receipts = append(receipts, r)
	}
	job.Output = h
	job.Sign(key(0))
	jobPath := writeJSON(t, dir, "job.json", job)
	recPath := writeJSON(t, dir, "receipts.json", receipts)
	code, out, e := run(t, "", "verify", "-plan", planPath, "-job", jobPath, "-receipts", recPath)
	if code != ExitOK {
		t.Fatalf("verify exit %d: %s %s", code, out, e)
	}
	var v shard.Verdict
	if err := json.Unmarshal([]byte(out), &v); err != nil || !v.OK {
		t.Fatalf("verdict %s: %v", out, err)
	}
	var sum int64
	for _, s := range v.Shares {
		sum += s.Amount
	}
	if sum != 7001 || len(v.Shares) != plan.Stages {
		t.Fatalf("shares %+v", v.Shares)
	}

	// Blocks table: the receipts' slot is missing, so the blockhash is
	// unknown.
	blocksPath := writeJSON(t, dir, "blocks.json", map[string]string{"999": shard.Blockhash{}.String()})
	if code, out, _ := run(t, "", "verify", "-plan", planPath, "-job", jobPath, "-receipts", recPath, "-blocks", blocksPath); code != ExitRejected || !strings.Contains(out, "unknown_blockhash") {
		t.Fatalf("unknown blockhash: %d %s", code, out)
	}
	// A narrow slot window rejects the binding.
	if code, out, _ := run(t, "", "verify", "-plan", planPath, "-job", jobPath, "-receipts", recPath, "-slots-after", "0"); code != ExitRejected || !strings.Contains(out, "block_outside_window") {
		t.Fatalf("slot window: %d %s", code, out)
	}
	receipts[0].Output[0] ^= 1 // signature no longer matches
	writeJSON(t, dir, "receipts.json", receipts)
	code, out, e = run(t, "", "verify", "-plan", planPath, "-job", jobPath, "-receipts", recPath)
	if code != ExitRejected || !strings.Contains(out, `"bad_signature"`) || !strings.Contains(e, "rejected") {
		t.Fatalf("forged receipt: exit %d: %s %s", code, out, e)
	}
}

func TestUsageAndBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.json")
	os.WriteFile(garbage, []byte(`{"model":`), 0o644)
	in, _ := pool(t)
	in.Params.MaxStages = 1
	in.Params.MinStages = 1
	in.Params.Sign(key(0))
	tight := writeJSON(t, dir, "tight.json", in)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, ExitUsage, "usage"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "unknown command"},
		{"missing input", []string{"plan"}, ExitUsage, "-in is required"},
		{"unreadable file", []string{"plan", "-in", filepath.Join(dir, "nope.json")}, ExitUsage, "no such file"},
		{"malformed pool", []string{"plan", "-in", garbage}, ExitUsage, "invalid record"},
		{"bad flag", []string{"verify", "-frob"}, ExitUsage, "flag provided but not defined"},
		{"no ring", []string{"plan", "-in", tight}, ExitRejected, "no ring"},
		{"verify without plan", []string{"verify", "-job", garbage}, ExitUsage, "-plan is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, e := run(t, "", c.args...)
			if code != c.code || !strings.Contains(e, c.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, e, c.code, c.want)
			}
		})
	}
}

// TestAcceptDefaultKey: without -key, accept uses $C0MPUTE_WORKER_KEY, as
// `workerd run` does.
func TestAcceptDefaultKey(t *testing.T) {
	dir := t.TempDir()
	in, nodes := pool(t)
	poolPath := writeJSON(t, dir, "pool.json", in)
	planPath := filepath.Join(dir, "plan.json")
	if code, _, e := run(t, "", "plan", "-in", poolPath, "-out", planPath); code != ExitOK {
		t.Fatal(e)
	}
	b, _ := os.ReadFile(planPath)
	plan, err := shard.DecodePlan(b)
	if err != nil {
		t.Fatal(err)
	}
	m := plan.Members[0]
	var k ed25519.PrivateKey
	for _, n := range nodes {
		if shard.KeyOf(n) == m.Node {
			k = n
		}
	}
	probes := map[shard.PublicKey]int64{}
	for _, r := range in.RTT {
		if r.From == m.Node {
			for _, p := range r.Peers {
				probes[p.To] = p.Micros
			}
		}
	}
	probePath := writeJSON(t, dir, "probes.json", probes)
	keyPath := writeKey(t, dir, k)
	var out, errb bytes.Buffer
	code := Main([]string{"accept", "-in", poolPath, "-plan", planPath, "-probes", probePath},
		Env{Stdout: &out, Stderr: &errb, Getenv: func(v string) string {
			if v == "C0MPUTE_WORKER_KEY" {
				return keyPath
			}
			return ""
		}})
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if a, err := shard.DecodeAcceptance(out.Bytes()); err != nil || a.Node != m.Node {
		t.Fatalf("acceptance %s: %v", out.String(), err)
	}
}

// TestSign: a hand-written capability record comes out signed by the key
// and decodes; bad kinds and fields are refused.
func TestSign(t *testing.T) {
	dir := t.TempDir()
	k := key(42)
	keyPath := writeKey(t, dir, k)
	rec := filepath.Join(dir, "cap.json")
	os.WriteFile(rec, []byte(`{"model":"`+strings.Repeat("ab", 32)+`","vram_bytes":25769803776,"layer_us":310,"uplink_bps":1000000000,"stake":0,"trusted":false,"time_ms":1764400000000}`), 0o644)
	code, out, e := run(t, "", "sign", "-kind", "capability", "-in", rec, "-key", keyPath)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, e)
	}
	c, err := shard.DecodeCapability([]byte(out))
	if err != nil || c.Node != shard.KeyOf(k) || c.VRAMBytes != 24<<30 {
		t.Fatalf("signed record %s: %v", out, err)
	}
	if code, _, e := run(t, "", "sign", "-kind", "plan", "-in", rec, "-key", keyPath); code != ExitUsage || !strings.Contains(e, "not one of") {
		t.Fatalf("bad kind: %d %s", code, e)
	}
	os.WriteFile(rec, []byte(`{"vram_bytes":-1,"layer_us":1,"uplink_bps":1,"time_ms":1}`), 0o644)
	if code, _, e := run(t, "", "sign", "-kind", "capability", "-in", rec, "-key", keyPath); code != ExitUsage || !strings.Contains(e, "VRAMBytes") {
		t.Fatalf("invalid record signed: %d %s", code, e)
	}
}
