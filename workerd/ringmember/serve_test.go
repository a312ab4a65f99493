package ringmember

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/infra/testmodel"
	"github.com/c0mpute/c0mpute/workerd/stagenet"
)

// TestServeRefusesBadAssignments: Serve checks the assignment and says
// what is wrong with it; a refused assignment leaves nothing served.
func TestServeRefusesBadAssignments(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	other := loadModel(t, "qwen2-q8_0", modelOptions("qwen2", testmodel.Q8_0))
	keys := memberKeys(m.name+"-assign", 2)
	plan, hash := planFor(t, m, keys)
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys}
	p0, _ := plan.Primary(0)
	p1, _ := plan.Primary(1)
	peers := map[shard.PublicKey]string{p0.Node: "127.0.0.1:1", p1.Node: "127.0.0.1:2"}
	good := func() *Assignment { return tr.assignment(t, 0, peers) }
	cases := []struct {
		name   string
		key    shard.PublicKey
		change func(a *Assignment)
		want   string
	}{
		{"no part", p0.Node, func(a *Assignment) { a.Part = nil }, "no loaded part"},
		{"no model id", p0.Node, func(a *Assignment) { a.Model = "" }, "model id"},
		{"plan hash", p0.Node, func(a *Assignment) { a.Hash[0] ^= 1 }, "the plan hashes to"},
		{"broken plan", p0.Node, func(a *Assignment) { a.Plan.Layers++ }, "plan"},
		{"another model's manifest", p0.Node, func(a *Assignment) { a.Manifest = other.pub.Manifest }, "the manifest hashes to"},
		{"not a member", shard.KeyOf(testKey("stranger")), func(*Assignment) {}, "is not in plan"},
		{"the wrong layers", p1.Node, func(*Assignment) {}, "holds layers"},
		{"no next address", p0.Node, func(a *Assignment) { a.Peers = map[shard.PublicKey]string{p0.Node: "127.0.0.1:1"} }, "no address for stage 1"},
		{"a bad address", p0.Node, func(a *Assignment) { a.Peers = map[shard.PublicKey]string{p1.Node: "nowhere"} }, "not host:port"},
		{"no context", p0.Node, func(a *Assignment) { a.ContextTokens = 0 }, "context is 0 tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := keyOf(keys, c.key)
			if key == nil {
				key = testKey("stranger")
			}
			srv, err := NewServer(key, "127.0.0.1:0", testLog(t))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			a := good()
			c.change(a)
			err = srv.Serve(a)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Serve: %v, want an error mentioning %q", err, c.want)
			}
			if srv.current() != nil {
				t.Fatal("a refused assignment is served")
			}
		})
	}
	if _, err := NewServer(keys[0][:10], "127.0.0.1:0", nil); err == nil {
		t.Error("a short key was taken")
	}
	for _, o := range []Option{WithPromptChunk(0), WithPromptChunk(MaxChunk + 1), WithStepTimeout(0), WithClock(nil)} {
		if _, err := NewServer(keys[0], "127.0.0.1:0", nil, o); err == nil {
			t.Error("a bad option was taken")
		}
	}
}

// TestHeldAssignment: a standby's assignment is held, not served: Chat
// refuses, nothing is dialled, the plan's members may probe it, and a
// data frame closes the sender's connection without harm.
func TestHeldAssignment(t *testing.T) {
	m := loadModel(t, "llama-q8_0", modelOptions("llama", testmodel.Q8_0))
	keys := memberKeys(m.name+"-standby", 4)
	plan, hash := planWith(t, m, keys, 2, 1)
	var standby shard.Member
	for _, mem := range plan.Members {
		if mem.Role == shard.RoleStandby {
			standby = mem
		}
	}
	if standby.Node.IsZero() {
		t.Fatalf("the plan has no standby: %+v", plan.Members)
	}
	tr := &testRing{m: m, plan: plan, hash: hash, keys: keys}
	srv, err := NewServer(keyOf(keys, standby.Node), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if err := srv.Serve(tr.assignment(t, standby.Stage, map[shard.PublicKey]string{})); err != nil {
		t.Fatal(err)
	}
	tr.driver = srv
	if c := tr.chat(t, greedy(prompts[0], 4, false)); !strings.Contains(c.Error, "not its driver") {
		t.Fatalf("chat on a standby: %q", c.Error)
	}
	p0, _ := plan.Primary(0)
	member, err := NewServer(keyOf(keys, p0.Node), "127.0.0.1:0", testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if d, err := member.Probe(ctx, srv.Key(), srv.Addr().String()); err != nil || d <= 0 {
		t.Fatalf("a member's probe of a standby: %v, %v", d, err)
	}
	c, err := stagenet.Dial(ctx, srv.Addr().String(), keyOf(keys, p0.Node), srv.Key())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(ctx, &stagenet.Frame{Kind: stagenet.KindOpen, Job: "j", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Recv(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a data frame to a standby: %v, want the connection closed", err)
	}
	srv.Drop(hash)
	if _, _, err := srv.Chat(ctx, Job{ID: "j", Ring: tr.mustJob(t)}, greedy(prompts[0], 4, false), func(oaiwire.Delta) error { return nil }); !errors.Is(err, ErrNotServing) {
		t.Fatalf("after drop: %v", err)
	}
}

// TestReason: an error frame's reason is cut to stagenet's limit on a
// UTF-8 boundary.
func TestReason(t *testing.T) {
	for _, n := range []int{0, 10, stagenet.MaxErrorPayload - 1, stagenet.MaxErrorPayload, stagenet.MaxErrorPayload + 1, 5000} {
		for _, pad := range []string{"a", "é", "日", "🐱"} {
			msg := strings.Repeat(pad, n/len(pad)+1)
			got := reason(errors.New(msg))
			if len(got) > stagenet.MaxErrorPayload || !utf8.Valid(got) || !strings.HasPrefix(msg, string(got)) {
				t.Fatalf("%d × %q: %d bytes, valid %v", n, pad, len(got), utf8.Valid(got))
			}
		}
	}
}
