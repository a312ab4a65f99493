package sample_test

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/engine/sample"
)

// FuzzSample: any logits (NaN, ±Inf, huge) and settings give an id in
// range, and greedy gives the argmax.
func FuzzSample(f *testing.F) {
	f.Add([]byte{0, 0, 128, 63, 0, 0, 0, 64}, float32(0.7), 2, float32(0.9), float32(0.05), uint64(1))
	f.Add([]byte{0, 0, 192, 127, 0, 0, 128, 255, 0, 0, 128, 127}, float32(1), 0, float32(0), float32(0), uint64(2))
	f.Fuzz(func(t *testing.T, raw []byte, temp float32, topK int, topP, minP float32, seed uint64) {
		logits := make([]float32, len(raw)/4)
		for i := range logits {
			logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		s, err := sample.New(sample.Params{Temperature: temp, TopK: topK, TopP: topP, MinP: minP, Seed: seed})
		if err != nil {
			return
		}
		id := s.Sample(logits)
		if len(logits) == 0 {
			if id != -1 {
				t.Fatalf("empty logits gave %d", id)
			}
			return
		}
		if id < 0 || int(id) >= len(logits) {
			t.Fatalf("id %d out of range %d", id, len(logits))
		}
		if s.Greedy() && id != sample.Argmax(logits) {
			t.Fatalf("greedy %d, argmax %d", id, sample.Argmax(logits))
		}
	})
}

// FuzzStopper: what is emitted plus what is flushed is the input up to
// the stop string completed first, however the deltas are cut.
func FuzzStopper(f *testing.F) {
	f.Add("ab", "c", "abEN", "D tail", "END")
	f.Add("日本", "語", "x日", "本y", "本")
	f.Fuzz(func(t *testing.T, stop1, stop2, d1, d2, d3 string) {
		stops := []string{stop1, stop2}
		s := sample.NewStopper(stops)
		var out strings.Builder
		stopped := false
		for _, d := range []string{d1, d2, d3} {
			e, st := s.Add(d)
			out.WriteString(e)
			stopped = st
		}
		if !stopped {
			out.WriteString(s.Flush())
		}
		all := d1 + d2 + d3
		// The oracle: feed one byte at a time and stop at the first
		// complete stop string.
		want := all
	scan:
		for e := 1; e <= len(all); e++ {
			longest := -1
			for _, x := range stops {
				if x != "" && strings.HasSuffix(all[:e], x) && len(x) > longest {
					longest = len(x)
				}
			}
			if longest >= 0 {
				want = all[:e-longest]
				break scan
			}
		}
		if out.String() != want {
			t.Fatalf("stops %q, input %q: got %q, want %q", stops, all, out.String(), want)
		}
	})
}
