package ringmember

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/backend/backendtest"
	"github.com/c0mpute/c0mpute/workerd/backend/builtin"
	"github.com/c0mpute/c0mpute/workerd/engine/gguf"
	"github.com/c0mpute/c0mpute/workerd/shardblob"
	"github.com/c0mpute/c0mpute/workerd/speculate"
)

// childEnv names the assignment file of a stage process: the test binary
// re-executed to run one non-driver stage as an OS process of its own.
const childEnv = "C0MPUTE_RINGMEMBER_STAGE"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(stageProcess(path))
	}
	code := m.Run()
	modelMu.Lock()
	for _, tm := range modelCache {
		tm.ref.Close()
	}
	if modelRoot != "" {
		os.RemoveAll(modelRoot)
	}
	modelMu.Unlock()
	os.Exit(code)
}

// waitLimit bounds every wait on a condition (a child's line, a frame),
// so a broken build fails instead of hanging; nothing asserts on time.
const waitLimit = 2 * time.Minute

// jinjaTemplate is the chat template the test models carry (as in
// workerd/backend/builtin's tests).
const jinjaTemplate = `{%- for m in messages %}<|{{ m.role }}|>{{ m.content }}{%- endfor %}<|assistant|>`

// testModel is a generated GGUF, split into signed blobs.
type testModel struct {
	name  string
	path  string // the whole file
	blobs string // Split's directory
	pub   shardblob.Published
	ref   *builtin.Backend // the built-in backend on the whole file
}

var (
	modelMu    sync.Mutex
	modelCache = map[string]*testModel{}
	modelRoot  string
)

// models are the rings' models: llama and qwen2, each in Q8_0 and Q4_K
// (the Q4_K_M mix), with 6 layers so 2-, 3- and 4-stage splits differ.
func modelOptions(arch string, typ testmodel.TensorType) testmodel.Options {
	return testmodel.Options{Seed: 9, Arch: arch, Type: typ, Layers: 6, Embedding: 256, FeedForward: 512, Heads: 4, KVHeads: 2,
		Context: 256, ChatTemplate: jinjaTemplate}
}

// loadModel writes, splits and signs a model once per test binary.
func loadModel(t testing.TB, name string, o testmodel.Options) *testModel {
	t.Helper()
	modelMu.Lock()
	defer modelMu.Unlock()
	if m, ok := modelCache[name]; ok {
		return m
	}
	if modelRoot == "" {
		dir, err := os.MkdirTemp("", "ringmember-test-")
		if err != nil {
			t.Fatal(err)
		}
		modelRoot = dir
	}
	dir := filepath.Join(modelRoot, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".gguf")
	if err := testmodel.WriteFile(path, o); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := filepath.Join(dir, "blobs")
	pub, err := shardblob.Split(f, blobs, name)
	if err != nil {
		t.Fatal(err)
	}
	pub.Sign(testKey("publisher"))
	ref, err := builtin.New(path, builtin.WithWorkers(1), builtin.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	m := &testModel{name: name, path: path, blobs: blobs, pub: pub, ref: ref}
	modelCache[name] = m
	return m
}

// planContext is the test plans' context (shard.Params.ContextTokens):
// the test models' own.
const planContext = 256

// testKey is a fixed key per name.
func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("c0mpute-ringmember-test-key:" + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// gatewayKey is the plans' coordinator: it signs the params and, at
// settlement, the job record.
var gatewayKey = testKey("gateway")

// planFor plans a ring of exactly one stage per member, with equal
// capabilities and equal round trips, from signed inputs as the gateway
// builds them, so the split and the order are the planner's.
func planFor(t testing.TB, m *testModel, keys []ed25519.PrivateKey) (shard.Plan, shard.Hash) {
	t.Helper()
	return planWith(t, m, keys, len(keys), 0)
}

// planWith plans a ring of exactly n stages with standbys per stage over
// the keys.
func planWith(t testing.TB, m *testModel, keys []ed25519.PrivateKey, n, standbys int) (shard.Plan, shard.Hash) {
	t.Helper()
	_, plan, hash := planInputs(t, m, keys, n, standbys, "")
	return plan, hash
}

// planInputs is planWith with the signed inputs the plan is computed from
// (what a ring_assign carries); variant changes the params' seed, and
// with it the plan's hash.
func planInputs(t testing.TB, m *testModel, keys []ed25519.PrivateKey, n, standbys int, variant string) (shard.Inputs, shard.Plan, shard.Hash) {
	t.Helper()
	md := m.pub.Model
	const ctxTokens = planContext
	perLayer := md.LayerBytes + md.KVBytesPerToken*ctxTokens
	// Room for an even share of the layers plus either boundary, so the
	// planner cannot pile every layer on one member.
	share := int64((md.Layers + n - 1) / n)
	vram := perLayer*share + md.EmbedBytes + md.HeadBytes
	now := time.Now().UnixMilli()
	in := shard.Inputs{Model: md}
	in.Params = shard.Params{Model: md.Hash, Admission: "open", VRAMFloorBytes: perLayer, ContextTokens: ctxTokens,
		MinStages: n, MaxStages: n, Standbys: standbys, Pinning: shard.PinNone, Seed: sha256.Sum256([]byte("ringmember-test-seed" + variant)), Time: now}
	in.Params.Sign(gatewayKey)
	gw := shard.KeyOf(gatewayKey)
	gwRow := shard.RTTRow{Time: now}
	for _, k := range keys {
		c := shard.Capability{Model: md.Hash, VRAMBytes: vram, LayerMicros: 1000, UplinkBps: 1_000_000_000, Time: now}
		c.Sign(k)
		in.Capabilities = append(in.Capabilities, c)
		row := shard.RTTRow{Time: now, Peers: []shard.RTTPeer{{To: gw, Micros: 1}}}
		for _, o := range keys {
			if !o.Equal(k) {
				row.Peers = append(row.Peers, shard.RTTPeer{To: shard.KeyOf(o), Micros: 1000})
			}
		}
		row.Sign(k)
		in.RTT = append(in.RTT, row)
		gwRow.Peers = append(gwRow.Peers, shard.RTTPeer{To: shard.KeyOf(k), Micros: 1})
	}
	gwRow.Sign(gatewayKey)
	in.RTT = append(in.RTT, gwRow)
	res, err := shard.NewPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Stages != n {
		t.Fatalf("the planner made %d stages, want %d", res.Plan.Stages, n)
	}
	return in, res.Plan, res.Hash
}

// memberKeys are n fixed keys for a ring of a model.
func memberKeys(model string, n int) []ed25519.PrivateKey {
	keys := make([]ed25519.PrivateKey, n)
	for i := range keys {
		keys[i] = testKey(fmt.Sprintf("%s-%d-of-%d", model, i, n))
	}
	return keys
}

// keyOf finds the private key of a plan member.
func keyOf(keys []ed25519.PrivateKey, node shard.PublicKey) ed25519.PrivateKey {
	for _, k := range keys {
		if shard.KeyOf(k) == node {
			return k
		}
	}
	return nil
}

// stageDir copies into a fresh directory exactly the blobs one stage
// pulls, so a stage never sees another's.
func stageDir(t testing.TB, m *testModel, first, last int) string {
	t.Helper()
	blobs, err := m.pub.Manifest.Blobs(first, last)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, b := range blobs {
		data, err := os.ReadFile(filepath.Join(m.blobs, b.Hash.String()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, b.Hash.String()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testLog logs to stderr under -v, else nowhere.
func testLog(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// testRing is a ring whose driver runs in the test process.
type testRing struct {
	m      *testModel
	plan   shard.Plan
	hash   shard.Hash
	keys   []ed25519.PrivateKey
	driver *Server
	// children are the stage processes by stage (nil for in-process
	// stages and for stage 0).
	children []*child
	servers  []*Server // in-process stage servers by stage
	// ctxTokens is the assignments' context (0: planContext).
	ctxTokens int
}

// newDriver starts stage 0's server in this process, allowing every plan
// member so stages that serve before it can connect.
func newDriver(t testing.TB, tr *testRing, opts ...Option) {
	t.Helper()
	p0, _ := tr.plan.Primary(0)
	s, err := NewServer(keyOf(tr.keys, p0.Node), "127.0.0.1:0", testLog(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var all []shard.PublicKey
	for _, k := range tr.keys {
		all = append(all, shard.KeyOf(k))
	}
	s.Allow(all...)
	tr.driver = s
}

// assignment opens a stage's part from its own blob directory.
func (tr *testRing) assignment(t testing.TB, stage int, peers map[shard.PublicKey]string) *Assignment {
	t.Helper()
	pm, _ := tr.plan.Primary(stage)
	part, err := shardblob.Open(stageDir(t, tr.m, pm.LayerStart, pm.LayerEnd), &tr.m.pub.Manifest, pm.LayerStart, pm.LayerEnd, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { part.Close() })
	ctxTokens := tr.ctxTokens
	if ctxTokens == 0 {
		ctxTokens = planContext
	}
	return &Assignment{Model: tr.m.name, Hash: tr.hash, Plan: tr.plan, Manifest: tr.m.pub.Manifest, Peers: peers, Part: part, Workers: 1,
		ContextTokens: ctxTokens}
}

// startInProcess runs every stage of an n-stage ring as a Server in this
// process (for tests of the protocol rather than of process boundaries).
func startInProcess(t testing.TB, m *testModel, n int, opts ...Option) *testRing {
	t.Helper()
	return startInProcessWith(t, m, n, planContext, opts...)
}

// startInProcessWith is startInProcess with the assignments' context.
func startInProcessWith(t testing.TB, m *testModel, n, ctxTokens int, opts ...Option) *testRing {
	t.Helper()
	keys := memberKeys(m.name+"-inproc", n)
	plan, hash := planFor(t, m, keys)
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys, servers: make([]*Server, n), ctxTokens: ctxTokens}
	newDriver(t, tr, opts...)
	tr.servers[0] = tr.driver
	peers := map[shard.PublicKey]string{}
	p0, _ := plan.Primary(0)
	peers[p0.Node] = tr.driver.Addr().String()
	for s := 1; s < n; s++ {
		pm, _ := plan.Primary(s)
		srv, err := NewServer(keyOf(keys, pm.Node), "127.0.0.1:0", testLog(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		tr.servers[s] = srv
		peers[pm.Node] = srv.Addr().String()
	}
	// Serve from the last stage down, so each member's first dial finds
	// its next stage serving.
	for s := n - 1; s >= 0; s-- {
		if err := tr.servers[s].Serve(tr.assignment(t, s, peers)); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

// childSpec is a stage process's assignment file.
type childSpec struct {
	Seed     []byte         `json:"seed"`
	Model    string         `json:"model"`
	Hash     shard.Hash     `json:"hash"`
	Plan     shard.Plan     `json:"plan"`
	Manifest shard.Manifest `json:"manifest"`
	Dir      string         `json:"dir"`
	Verbose  bool           `json:"verbose"`
}

// child is a running stage process.
type child struct {
	stage  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	exited chan struct{}
	err    error // the process's exit, once exited is closed
	killed bool
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // bound what a chatty child can make the test hold
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// line waits for the child's next line on stdout.
func (c *child) line(t testing.TB) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok {
			t.Fatalf("stage %d process ended early:\n%s", c.stage, c.stderr.String())
		}
		return l
	case <-time.After(waitLimit):
		t.Fatalf("stage %d process said nothing within %s:\n%s", c.stage, waitLimit, c.stderr.String())
	}
	return ""
}

// startChild runs one stage as its own process: it loads its part from
// its own blob directory, listens, and serves once given the peers.
func startChild(t testing.TB, tr *testRing, stage int) *child {
	t.Helper()
	pm, _ := tr.plan.Primary(stage)
	spec := childSpec{Seed: keyOf(tr.keys, pm.Node).Seed(), Model: tr.m.name, Hash: tr.hash, Plan: tr.plan, Manifest: tr.m.pub.Manifest,
		Dir: stageDir(t, tr.m, pm.LayerStart, pm.LayerEnd), Verbose: testing.Verbose()}
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "assignment.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	c := &child{stage: stage, cmd: cmd, lines: make(chan string, 4), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 4096), 64<<10)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		select {
		case <-c.exited:
		case <-time.After(waitLimit):
			_ = cmd.Process.Kill()
			<-c.exited
		}
		if !c.killed && c.err != nil {
			// A stage process that fails, panics or races (the race
			// detector's exit status) fails the test.
			t.Errorf("stage %d process: %v", stage, c.err)
		}
		if t.Failed() {
			t.Logf("stage %d process stderr:\n%s", stage, c.stderr.String())
		}
	})
	return c
}

// kill ends a stage process at once and waits until it is gone.
func (c *child) kill(t testing.TB) {
	t.Helper()
	c.killed = true
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-c.exited
}

// startProcesses runs an n-stage ring: stage 0 in this process, every
// other stage in a process of its own.
func startProcesses(t testing.TB, m *testModel, n int, opts ...Option) *testRing {
	t.Helper()
	keys := memberKeys(m.name, n)
	plan, hash := planFor(t, m, keys)
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys, children: make([]*child, n)}
	newDriver(t, tr, opts...)
	peers := map[string]string{}
	p0, _ := plan.Primary(0)
	peers[p0.Node.String()] = tr.driver.Addr().String()
	for s := 1; s < n; s++ {
		tr.children[s] = startChild(t, tr, s)
	}
	for s := 1; s < n; s++ {
		l := tr.children[s].line(t)
		addr, ok := strings.CutPrefix(l, "addr ")
		if !ok {
			t.Fatalf("stage %d process: %q, want its address", s, l)
		}
		pm, _ := plan.Primary(s)
		peers[pm.Node.String()] = addr
	}
	pj, err := json.Marshal(peers)
	if err != nil {
		t.Fatal(err)
	}
	for s := n - 1; s >= 1; s-- {
		if _, err := fmt.Fprintf(tr.children[s].stdin, "%s\n", pj); err != nil {
			t.Fatal(err)
		}
		if l := tr.children[s].line(t); l != "serving" {
			t.Fatalf("stage %d process: %q, want serving", s, l)
		}
	}
	ps := map[shard.PublicKey]string{}
	for k, v := range peers {
		var pk shard.PublicKey
		if err := pk.UnmarshalText([]byte(k)); err != nil {
			t.Fatal(err)
		}
		ps[pk] = v
	}
	if err := tr.driver.Serve(tr.assignment(t, 0, ps)); err != nil {
		t.Fatal(err)
	}
	return tr
}

// stageProcess is a stage process's main: it reads its assignment file,
// opens its part, listens and prints "addr <host:port>", reads the
// peers' addresses (one JSON line on stdin), serves and prints
// "serving", then serves until stdin closes.
func stageProcess(path string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "stage process: "+format+"\n", a...)
		return 1
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail("%v", err)
	}
	var spec childSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fail("assignment: %v", err)
	}
	if len(spec.Seed) != ed25519.SeedSize {
		return fail("assignment: seed of %d bytes", len(spec.Seed))
	}
	key := ed25519.NewKeyFromSeed(spec.Seed)
	level := slog.LevelWarn
	if spec.Verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("pid", os.Getpid())
	var me shard.Member
	for _, m := range spec.Plan.Members {
		if m.Node == shard.KeyOf(key) && m.Role == shard.RolePrimary {
			me = m
		}
	}
	part, err := shardblob.Open(spec.Dir, &spec.Manifest, me.LayerStart, me.LayerEnd, 1)
	if err != nil {
		return fail("%v", err)
	}
	defer part.Close()
	srv, err := NewServer(key, "127.0.0.1:0", log.With("stage", me.Stage))
	if err != nil {
		return fail("%v", err)
	}
	defer srv.Close()
	fmt.Printf("addr %s\n", srv.Addr())
	in := bufio.NewReader(io.LimitReader(os.Stdin, 1<<20))
	line, err := in.ReadString('\n')
	if err != nil {
		return fail("peers: %v", err)
	}
	var raw map[string]string
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		return fail("peers: %v", err)
	}
	peers := map[shard.PublicKey]string{}
	for k, v := range raw {
		var pk shard.PublicKey
		if err := pk.UnmarshalText([]byte(k)); err != nil {
			return fail("peers: %v", err)
		}
		peers[pk] = v
	}
	if err := srv.Serve(&Assignment{Model: spec.Model, Hash: spec.Hash, Plan: spec.Plan, Manifest: spec.Manifest, Peers: peers, Part: part, Workers: 1,
		ContextTokens: planContext}); err != nil {
		return fail("%v", err)
	}
	fmt.Println("serving")
	_, _ = io.Copy(io.Discard, in) // serve until the test closes stdin
	return 0
}

// ringJob is a fresh job for the ring, as the gateway would dispatch it:
// a new ticket per attempt, the nonce derived from it.
func (tr *testRing) ringJob(t testing.TB) (Job, time.Time) {
	t.Helper()
	var tk [32]byte
	if _, err := rand.Read(tk[:]); err != nil {
		t.Fatal(err)
	}
	ticket := base64.RawURLEncoding.EncodeToString(tk[:])
	id := "job-" + ticket[:16]
	return Job{ID: id, Ring: relaymsg.RingJob{Plan: tr.hash, Nonce: relaymsg.RingNonce(ticket), Slot: 4242}}, time.Now()
}

// chatResult is one Chat's outcome on the ring.
type chatResult struct {
	backendtest.Collected
	done *relaymsg.RingDone
	job  Job
	at   time.Time
}

// chat runs a request on the ring.
func (tr *testRing) chat(t testing.TB, req *oaiwire.ChatRequest) chatResult {
	t.Helper()
	job, at := tr.ringJob(t)
	var c chatResult
	c.job, c.at = job, at
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	res, done, err := tr.driver.Chat(ctx, job, req, func(d oaiwire.Delta) error {
		c.Deltas = append(c.Deltas, d)
		return nil
	})
	c.Result, c.done = res, done
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

// reference runs a request on the built-in backend over the whole file.
func (m *testModel) reference(req *oaiwire.ChatRequest) backendtest.Collected {
	return backendtest.Run(context.Background(), m.ref, builtin.ModelID(m.path), req)
}

// verify settles a chat's ring account as the gateway does (settle), and
// requires the receipts to cover every position of the reply.
func (tr *testRing) verify(t testing.TB, c chatResult) {
	t.Helper()
	tr.settle(t, c)
	d := c.done
	// Every token but the last sampled one runs through the ring, and so
	// does every rejected draft; a reply that stops (an end token, a stop
	// string) inside a loop's accepted drafts leaves the rest of them run
	// but unused. A reply cut by its length drafts no further than it.
	u := c.Result.Usage
	want := u.PromptTokens + u.CompletionTokens - 1 + u.CompletionTokensDetails.RejectedPredictionTokens
	if d.TokenEnd < want || d.TokenEnd > want+speculate.MaxGamma || c.Result.FinishReason == oaiwire.FinishLength && d.TokenEnd != want {
		t.Errorf("the receipts cover %d positions, the reply ran %d (%s)", d.TokenEnd, want, c.Result.FinishReason)
	}
}

// settle settles a chat's ring account as the gateway does: a job record
// signed by the coordinator, with the Open's nonce and 1000 units to
// share, through shard.Verify; it requires every stage paid and the
// shares to sum to 1000.
func (tr *testRing) settle(t testing.TB, c chatResult) {
	t.Helper()
	if c.done == nil {
		t.Fatalf("no ring account (error %q)", c.Error)
	}
	d := c.done
	rec := shard.Job{ID: c.job.ID, Plan: tr.hash, Model: tr.plan.Model, Nonce: c.job.Ring.Nonce, Input: d.Input, Output: d.Output,
		TokenStart: d.TokenStart, TokenEnd: d.TokenEnd, Slot: c.job.Ring.Slot, Time: c.at.UnixMilli(), Earnings: 1000}
	rec.Sign(gatewayKey)
	v := shard.Verify(&tr.plan, &rec, d.Receipts, shard.DefaultWindow)
	if !v.OK {
		t.Fatalf("shard.Verify: %s at stage %d: %s", v.Reason, v.Stage, v.Detail)
	}
	var sum int64
	for _, s := range v.Shares {
		sum += s.Amount
	}
	if sum != 1000 || len(v.Shares) != tr.plan.Stages {
		t.Fatalf("shares %+v: %d stages paid %d in all, want %d stages and 1000", v.Shares, len(v.Shares), sum, tr.plan.Stages)
	}
}

// same reports how a ring reply differs from the reference, or "".
func same(got chatResult, want backendtest.Collected) string {
	if len(want.Deltas) == 0 {
		return "the built-in reply is empty: nothing to compare"
	}
	if got.Error != "" || want.Error != "" {
		return fmt.Sprintf("errors: ring %q, built-in %q", got.Error, want.Error)
	}
	// The ring's usage also says how its drafts fared (the built-in
	// backend drafts nothing): compared apart from the rest.
	d := got.Result.Usage.CompletionTokensDetails
	if d == nil {
		return "the ring's usage has no completion_tokens_details"
	}
	if d.AcceptedPredictionTokens < 0 || d.AcceptedPredictionTokens > got.Result.Usage.CompletionTokens || d.RejectedPredictionTokens < 0 {
		return fmt.Sprintf("the ring's usage details %+v do not fit %d completion tokens", *d, got.Result.Usage.CompletionTokens)
	}
	plain := got.Collected
	plain.Result.Usage.CompletionTokensDetails = nil
	g, _ := json.Marshal(plain)
	w, _ := json.Marshal(want)
	if !bytes.Equal(g, w) {
		return fmt.Sprintf("ring:\n%s\nbuilt-in:\n%s", g, w)
	}
	return ""
}

// mustJob is the ring part of a fresh job.
func (tr *testRing) mustJob(t testing.TB) relaymsg.RingJob {
	t.Helper()
	j, _ := tr.ringJob(t)
	return j.Ring
}
