package shard

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestPublicKeyCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		var a, b PublicKey
		for i := range a {
			a[i] = byte(rng.IntN(3)) // many equal prefixes
			b[i] = byte(rng.IntN(3))
		}
		if rng.IntN(10) == 0 {
			b = a
		}
		if got, want := a.Compare(&b), bytes.Compare(a[:], b[:]); got != want {
			t.Fatalf("Compare(%x, %x) = %d, want %d", a, b, got, want)
		}
	}
}

func TestTextForms(t *testing.T) {
	var k PublicKey
	if err := k.UnmarshalText([]byte("not-base58!")); err == nil {
		t.Fatal("bad key accepted")
	}
	if err := k.UnmarshalText([]byte("11111111")); err == nil {
		t.Fatal("short key accepted")
	}
	var h Hash
	if err := h.UnmarshalText([]byte("zz")); err == nil {
		t.Fatal("bad hash accepted")
	}
	if err := h.UnmarshalText(bytes.Repeat([]byte("g"), 64)); err == nil {
		t.Fatal("non-hex hash accepted")
	}
	var s Signature
	if err := s.UnmarshalText([]byte("abc")); err == nil {
		t.Fatal("short signature accepted")
	}
	var bh Blockhash
	if err := bh.UnmarshalText(bytes.Repeat([]byte("z"), 300)); err == nil {
		t.Fatal("long blockhash accepted")
	}
}
