package shard

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// samples is one signed value of every record, built from fixed keys: the
// wire formats README.md documents. Each has a canonical encoding whose
// bytes are pinned too, so a change to what is signed shows up as a diff.
type sample struct {
	name      string // file stem
	fuzz      string // fuzz target whose corpus it seeds
	value     any
	canonical []byte
}

func samples(t testing.TB) []sample {
	t.Helper()
	rng := rand.New(rand.NewPCG(99, 1))
	var in Inputs
	var res Result
	for {
		in = randomInputs(rng, poolShape{n: 7, maxStagesHint: 3, sign: true, backups: true})
		observeLayers(&in)
		var err error
		if res, err = NewPlan(in); err == nil && res.Plan.Stages >= 2 && in.Params.Pinning == PinBoundary && len(res.Plan.Members) > res.Plan.Stages {
			break
		}
	}
	man, _ := testModel(t, 3)
	m, _ := res.Plan.Primary(0)
	var acc Acceptance
	for i := 2; i < 602; i++ {
		if KeyOf(testKey(i)) == m.Node {
			acc = Acceptance{Plan: res.Hash, Node: m.Node, Stage: 0, Role: RolePrimary, Time: 1_764_400_000_000}
			acc.Sig = sign(testKey(i), acc.canonical())
		}
	}
	f := &ringFixture{in: in, plan: res.Plan, keys: map[PublicKey]ed25519.PrivateKey{}, coord: testKey(0)}
	for i := 2; i < 602; i++ {
		f.keys[KeyOf(testKey(i))] = testKey(i)
	}
	job := f.job("job_golden")
	receipts := f.receipts(&job)
	doc := PlanDoc{Hash: res.Hash, Plan: res.Plan}
	inputsCanon := in.Hash()
	return []sample{
		{"capability", "FuzzDecodeCapability", &in.Capabilities[0], in.Capabilities[0].canonical()},
		{"rtt_row", "FuzzDecodeRTTRow", &in.RTT[0], in.RTT[0].canonical()},
		{"model", "FuzzDecodeModel", &in.Model, in.Model.canonical()},
		{"params", "FuzzDecodeParams", &in.Params, in.Params.canonical()},
		{"inputs", "FuzzDecodeInputs", &in, inputsCanon[:]},
		{"plan", "FuzzDecodePlan", &doc, res.Plan.canonical()},
		{"acceptance", "FuzzDecodeAcceptance", &acc, acc.canonical()},
		{"manifest", "FuzzDecodeManifest", &man, man.canonical()},
		{"job", "FuzzDecodeJob", &job, job.canonical()},
		{"job", "FuzzParseJob", &job, job.canonical()},
		{"receipt", "FuzzDecodeReceipt", &receipts[0], receipts[0].canonical()},
		{"receipts", "FuzzDecodeReceipts", &receipts, receipts[1].canonical()},
	}
}

// observeLayers has every candidate's row report a layer time for each
// candidate it measured (the claim plus a tenth, plus 7 µs), re-signed, so
// the golden rows, inputs and plan pin RTTPeer.LayerMicros too.
func observeLayers(in *Inputs) {
	claim := map[PublicKey]int64{}
	for _, c := range in.Capabilities {
		claim[c.Node] = c.LayerMicros
	}
	keys := map[PublicKey]ed25519.PrivateKey{}
	for i := 2; i < 602; i++ {
		keys[KeyOf(testKey(i))] = testKey(i)
	}
	for i := range in.RTT {
		r := &in.RTT[i]
		if _, ok := claim[r.From]; !ok {
			continue
		}
		for j := range r.Peers {
			if us, ok := claim[r.Peers[j].To]; ok {
				r.Peers[j].LayerMicros = us + us/10 + 7
			}
		}
		r.Sign(keys[r.From])
	}
}

// TestGolden pins the JSON of every record and its canonical bytes.
// Regenerate with: go test ./functions/shard -run TestGolden -update
func TestGolden(t *testing.T) {
	for _, s := range samples(t) {
		b, err := json.MarshalIndent(s.value, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, '\n')
		canon := []byte(hex.EncodeToString(s.canonical) + "\n")
		jsonPath := filepath.Join("testdata", "golden", s.name+".json")
		canonPath := filepath.Join("testdata", "golden", s.name+".canonical.hex")
		if *update {
			os.MkdirAll(filepath.Dir(jsonPath), 0o755)
			os.WriteFile(jsonPath, b, 0o644)
			os.WriteFile(canonPath, canon, 0o644)
			writeSeeds(t, s.fuzz, b)
			continue
		}
		for path, got := range map[string][]byte{jsonPath: b, canonPath: canon} {
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from what the code produces (run with -update if the change is meant)", path)
			}
		}
	}
}

// writeSeeds writes a fuzz target's seed corpus: the valid record, and
// broken variants (truncated, a flipped signature, an unknown field,
// trailing data, the wrong type) that reach each rejection path.
func writeSeeds(t testing.TB, target string, valid []byte) {
	dir := filepath.Join("testdata", "fuzz", target)
	os.MkdirAll(dir, 0o755)
	compact := new(bytes.Buffer)
	json.Compact(compact, valid)
	c := compact.Bytes()
	seeds := map[string][]byte{
		"valid":         c,
		"truncated":     c[:len(c)/2],
		"unknown-field": append([]byte(`{"zzz":1,`), c[1:]...),
		"trailing":      append(append([]byte(nil), c...), []byte(" {}")...),
		"wrong-type":    []byte(`[1,2,3]`),
		"empty":         {},
		"null":          []byte(`null`),
	}
	if i := bytes.Index(c, []byte(`"sig":"`)); i >= 0 {
		flipped := append([]byte(nil), c...)
		if flipped[i+8] == '2' {
			flipped[i+8] = '3'
		} else {
			flipped[i+8] = '2'
		}
		seeds["flipped-sig"] = flipped
	}
	for name, b := range seeds {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
