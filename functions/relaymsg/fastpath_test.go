package relaymsg

import (
	"reflect"
	"testing"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
)

// agreesWithGeneral fails t if decodeFast accepts b differently from
// decodeGeneral: whatever the fast path decodes, the general path must
// decode to the same message.
func agreesWithGeneral(t *testing.T, b []byte) (fast bool) {
	t.Helper()
	m, ok := decodeFast(b)
	if !ok {
		return false
	}
	want, err := decodeGeneral(b)
	if err != nil {
		t.Fatalf("decodeFast accepted what Decode refuses (%v): %q", err, b)
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("decodeFast and the general path differ:\n%#v\n%#v\ninput %q", m, want, b)
	}
	return true
}

// TestDecodeFast: every message as Encode writes it takes the fast path
// and decodes as the general path does; inputs the fast path must not
// judge (a duplicate key changing the header, trailing data, another
// version) fall through to it.
func TestDecodeFast(t *testing.T) {
	for _, m := range samples() {
		b, err := Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if !agreesWithGeneral(t, b) {
			if _, err := decodeGeneral(b); err == nil {
				t.Errorf("%T as encoded missed the fast path: %q", m, b)
			}
		}
	}
	for _, tt := range []struct {
		name string
		in   string
	}{
		{"type changed by a duplicate key", `{"v":1,"type":"heartbeat","type":"drain"}`},
		{"version changed by a duplicate key", `{"v":1,"type":"heartbeat","v":2}`},
		{"trailing brace", `{"v":1,"type":"heartbeat"}}`},
		{"trailing value", `{"v":1,"type":"heartbeat"} {}`},
		{"unknown type", `{"v":1,"type":"nope"}`},
		{"unterminated type", `{"v":1,"type":"heartbeat`},
		{"empty chunk", `{"v":1,"type":"chunk","job":"j","to":"c","seq":0}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if agreesWithGeneral(t, []byte(tt.in)) {
				t.Errorf("the fast path decoded %q: it must leave it to the general path", tt.in)
			}
		})
	}
}

// FuzzDecodeFast checks that the fast path never accepts what the general
// path refuses or decodes differently.
func FuzzDecodeFast(f *testing.F) {
	for _, m := range samples() {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"v":1,"type":"heartbeat","type":"drain"}`))
	f.Add([]byte(`{"v":1,"type":"chunk","job":"j","to":"c","seq":0,"deltas":[{"content":"x"}],"v":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > MaxMessage {
			return
		}
		agreesWithGeneral(t, b)
	})
}

// BenchmarkDecodeChunk decodes a worker's chunk of four deltas, the
// message the gateway decodes twice per relayed chunk (relay function and
// listener): "fast" is Decode, "general" the header-then-message path it
// took for every message before.
func BenchmarkDecodeChunk(b *testing.B) {
	c := &Chunk{Job: "chatcmpl-0123456789abcdefghijklmn", To: "TWegAcC4EowCHnA=", Seq: 7, Ticket: "0123456789abcdef0123456789abcdef0123456789a",
		From: "AbCdEfGhIjKlMnO="}
	for _, w := range []string{" the", " quick", " brown", " fox"} {
		c.Deltas = append(c.Deltas, oaiwire.Delta{Content: w})
	}
	msg, err := Encode(c)
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []struct {
		name   string
		decode func([]byte) (any, error)
	}{{"fast", Decode}, {"general", decodeGeneral}} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.decode(msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
