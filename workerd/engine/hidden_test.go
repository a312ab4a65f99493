package engine_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine"
)

var update = flag.Bool("update", false, "rewrite golden files and the fuzz seed corpus")

func sampleHidden() *engine.Hidden {
	h := &engine.Hidden{Pos: 5, Tokens: 2, Dim: 3, Data: []float32{1, -2.5, 0.1, 65504, -0.0, 3e-8}}
	return h
}

// TestWireGolden pins the wire form: header, both encodings and the
// receipt hash.
func TestWireGolden(t *testing.T) {
	var b strings.Builder
	for _, dt := range []engine.DType{engine.F32, engine.F16} {
		w, err := engine.EncodeHidden(sampleHidden(), dt)
		if err != nil {
			t.Fatal(err)
		}
		sum := engine.HashHidden(w)
		fmt.Fprintf(&b, "dtype %d\nbytes %s\nsha256 %s\n", dt, hex.EncodeToString(w), hex.EncodeToString(sum[:]))
	}
	path := filepath.Join("testdata", "hidden.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if b.String() != string(want) {
		t.Errorf("wire form changed:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestWireRoundTrip(t *testing.T) {
	h := sampleHidden()
	w, _ := engine.EncodeHidden(h, engine.F32)
	g, err := engine.DecodeHidden(w)
	if err != nil {
		t.Fatal(err)
	}
	if g.Pos != h.Pos || g.Tokens != h.Tokens || g.Dim != h.Dim || !bitsEqual(g.Data, h.Data) {
		t.Errorf("F32 round trip: %+v", g)
	}
	w16, _ := engine.EncodeHidden(h, engine.F16)
	g, err = engine.DecodeHidden(w16)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range h.Data {
		if math.Abs(float64(g.Data[i]-v)) > 1e-3*math.Abs(float64(v))+6e-8 {
			t.Errorf("F16 element %d: %g, sent %g", i, g.Data[i], v)
		}
	}
	if len(w16)-20 != (len(w)-20)/2 {
		t.Error("F16 is not half the F32 payload")
	}
}

func wireSeeds() map[string][]byte {
	w32, _ := engine.EncodeHidden(sampleHidden(), engine.F32)
	w16, _ := engine.EncodeHidden(sampleHidden(), engine.F16)
	mod := func(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	nan := bytes.Clone(w32)
	copy(nan[20:], []byte{0, 0, 0xc0, 0x7f})
	return map[string][]byte{
		"f32": w32, "f16": w16,
		"magic": mod(w32, 0, 'X'), "version": mod(w32, 4, 2), "dtype": mod(w32, 5, 7), "reserved": mod(w32, 6, 1),
		"tokens": mod(w32, 12, 9), "dim-zero": mod(mod(w32, 16, 0), 17, 0), "short": w32[:len(w32)-1], "nan": nan,
	}
}

func TestWireErrors(t *testing.T) {
	for name, b := range wireSeeds() {
		_, err := engine.DecodeHidden(b)
		if name == "f32" || name == "f16" {
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if !errors.Is(err, engine.ErrWire) {
			t.Errorf("%s: %v, want ErrWire", name, err)
		}
	}
	if _, err := engine.EncodeHidden(&engine.Hidden{Tokens: 1, Dim: 2, Data: []float32{1}}, engine.F32); err == nil {
		t.Error("encode with a short data slice: no error")
	}
	if _, err := engine.EncodeHidden(sampleHidden(), 9); err == nil {
		t.Error("encode with an unknown dtype: no error")
	}
}

// FuzzDecodeHidden: no input panics, and what decodes re-encodes to the
// same bytes (so the receipt hash of what was received is well defined).
func FuzzDecodeHidden(f *testing.F) {
	for _, b := range wireSeeds() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := engine.DecodeHidden(b)
		if err != nil {
			if !errors.Is(err, engine.ErrWire) {
				t.Fatalf("error %v does not wrap ErrWire", err)
			}
			return
		}
		again, err := engine.EncodeHidden(h, engine.DType(b[5]))
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs (%v)", err)
		}
	})
}

// TestWriteWireCorpus writes FuzzDecodeHidden's seed corpus (-update).
func TestWriteWireCorpus(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeHidden")
	os.MkdirAll(dir, 0o755)
	for name, b := range wireSeeds() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
