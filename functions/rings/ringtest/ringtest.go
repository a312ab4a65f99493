// Package ringtest is a test kit for ring models: a published model (a
// signed manifest and model descriptor over random blobs, served over
// HTTP as `workerd shard publish` lays them out) and members that sign
// real shard records with their own keys. Nothing in it is a stand-in:
// the records are the ones a workerd member signs, checked by the same
// functions/shard code.
package ringtest

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
)

// Key derives a deterministic ed25519 key from a label.
func Key(label string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("ringtest:" + label))
	return ed25519.NewKeyFromSeed(seed[:])
}

// Shape is the published model's shape. Blobs are BlobBytes of seeded
// random bytes each; the descriptor budgets the byte counts given, which
// placement reasons with.
type Shape struct {
	Layers          int
	BlobBytes       int
	LayerBytes      int64
	KVBytesPerToken int64
	EmbedBytes      int64
	HeadBytes       int64
	ActivationBytes int64
}

// Published is a model published under URL: URL/manifest.json,
// URL/model.json and URL/<hex sha256> for each blob.
type Published struct {
	URL       string
	Manifest  shard.Manifest
	Model     shard.Model
	Publisher ed25519.PrivateKey

	mu    sync.Mutex
	files map[string][]byte
}

// Publish signs a manifest and a descriptor of name with shape s over
// random blobs and serves them until the test ends.
func Publish(t testing.TB, name string, s Shape) *Published {
	t.Helper()
	p := &Published{Publisher: Key("publisher:" + name), files: map[string][]byte{}}
	seed := sha256.Sum256([]byte(name))
	rng := rand.New(rand.NewChaCha8(seed))
	blob := func() shard.Blob {
		b := make([]byte, s.BlobBytes)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		h := sha256.Sum256(b)
		p.files[shard.Hash(h).String()] = b
		return shard.Blob{Hash: h, Size: int64(len(b))}
	}
	p.Manifest = shard.Manifest{Name: name, Embed: blob()}
	for range s.Layers {
		p.Manifest.Layers = append(p.Manifest.Layers, blob())
	}
	p.Manifest.Head = blob()
	p.Manifest.Sign(p.Publisher)
	p.Model = shard.Model{Name: name, Hash: p.Manifest.Hash(), Layers: s.Layers, LayerBytes: s.LayerBytes,
		KVBytesPerToken: s.KVBytesPerToken, EmbedBytes: s.EmbedBytes, HeadBytes: s.HeadBytes, ActivationBytes: s.ActivationBytes}
	p.Model.Sign(p.Publisher)
	p.Set("manifest.json", mustJSON(t, p.Manifest))
	p.Set("model.json", mustJSON(t, p.Model))
	srv := httptest.NewServer(http.StripPrefix("/models/"+name+"/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		b, ok := p.files[r.URL.Path]
		p.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/models/" + name
	return p
}

// Set replaces (or with nil, removes) a published file.
func (p *Published) Set(name string, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b == nil {
		delete(p.files, name)
		return
	}
	p.files[name] = b
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Member is a ring member as the gateway sees it: a relay connection with
// an identity key, the account its worker token belongs to and the
// address it advertises.
type Member struct {
	Key     ed25519.PrivateKey
	Node    shard.PublicKey
	Conn    string
	Account string
	Addr    string
}

// NewMember makes member i: key Key("member:i"), connection "conn-i",
// account "acct-i", address 10.0.0.i:7000.
func NewMember(i int) *Member {
	k := Key(fmt.Sprint("member:", i))
	return &Member{Key: k, Node: shard.KeyOf(k), Conn: fmt.Sprint("conn-", i), Account: fmt.Sprint("acct-", i),
		Addr: fmt.Sprintf("10.0.%d.%d:7000", i/250, i%250+1)}
}

// Pubkey is the identity as a worker record holds it (base58).
func (m *Member) Pubkey() string { return m.Node.String() }

// Announce is the member's signed announcement for a ring model with
// manifest hash model.
func (m *Member) Announce(ringModel string, model shard.Hash, vram, layerMicros int64, now time.Time) *relaymsg.RingAnnounce {
	c := shard.Capability{Model: model, VRAMBytes: vram, LayerMicros: layerMicros, UplinkBps: 1_000_000_000, Time: now.UnixMilli()}
	c.Sign(m.Key)
	return &relaymsg.RingAnnounce{Model: ringModel, Capability: c, Advertise: m.Addr}
}

// RTT is a measurement between two members, symmetric.
type RTT func(a, b shard.PublicKey) int64

// Answer is the member's signed RTT row for a probe.
func (m *Member) Answer(p *relaymsg.RingProbe, rtt RTT, now time.Time) *relaymsg.RingRTT {
	row := shard.RTTRow{Time: now.UnixMilli()}
	for _, peer := range p.Peers {
		row.Peers = append(row.Peers, shard.RTTPeer{To: peer.Node, Micros: rtt(m.Node, peer.Node)})
	}
	row.Sign(m.Key)
	return &relaymsg.RingRTT{Model: p.Model, Row: row}
}

// Accept is what a member does with an assignment: shard.Accept, with its
// own probes of its ring neighbours (rtt) and, for the coordinator, the
// matrix's own value (the gateway's hops are nominal).
func (m *Member) Accept(a *relaymsg.RingAssign, rtt RTT, now time.Time) (*relaymsg.RingReady, error) {
	measured := map[shard.PublicKey]int64{}
	coord := a.Inputs.Params.Coordinator
	for _, row := range a.Inputs.RTT {
		if row.From != coord {
			continue
		}
		for _, p := range row.Peers {
			if p.To == m.Node {
				measured[coord] = p.Micros
			}
		}
	}
	for _, mem := range a.Plan.Members {
		if mem.Node != m.Node {
			measured[mem.Node] = rtt(m.Node, mem.Node)
		}
	}
	acc, err := shard.Accept(m.Key, a.Inputs, a.Hash, measured, shard.DefaultTolerance, now)
	if err != nil {
		return nil, err
	}
	return &relaymsg.RingReady{Model: a.Model, Acceptance: acc}, nil
}

// Receipt is the member's signed receipt for a stage of a job.
func (m *Member) Receipt(r shard.Receipt) shard.Receipt {
	r.Sign(m.Key)
	return r
}

// Distance is an RTT that grows with how far apart two keys sort: every
// pair differs, so the ring order is not a tie.
func Distance(a, b shard.PublicKey) int64 {
	x, y := int64(a[0])<<8|int64(a[1]), int64(b[0])<<8|int64(b[1])
	d := x - y
	if d < 0 {
		d = -d
	}
	return 1_000 + d/16
}
