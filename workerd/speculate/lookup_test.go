package speculate_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/c0mpute/c0mpute/workerd/speculate"
)

func draft(t testing.TB, d speculate.Drafter, history []int32, n int) []int32 {
	t.Helper()
	got, err := d.Draft(context.Background(), history, n)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestLookupDraft(t *testing.T) {
	for _, c := range []struct {
		name       string
		prediction []int32
		history    []int32
		n          int
		want       []int32
	}{
		{"empty history", []int32{1, 2, 3}, nil, 4, nil},
		{"no tokens wanted", []int32{1, 2, 3}, []int32{1}, 0, nil},
		{"nothing found", []int32{1, 2, 3}, []int32{7, 8, 9}, 4, nil},
		{"prediction, up to n", []int32{10, 11, 12, 13, 14, 15}, []int32{1, 2, 10, 11}, 3, []int32{12, 13, 14}},
		{"prediction, to its end", []int32{10, 11, 12, 13}, []int32{1, 11}, 8, []int32{12, 13}},
		{"a match at the prediction's end has nothing after it", []int32{10, 11}, []int32{1, 11}, 8, nil},
		{"longest suffix wins", []int32{2, 3, 40, 1, 2, 3, 50}, []int32{9, 1, 2, 3}, 1, []int32{50}},
		{"history", nil, []int32{5, 6, 7, 8, 5, 6}, 2, []int32{7, 8}},
		{"latest earlier occurrence in history", nil, []int32{5, 6, 1, 5, 6, 2, 5, 6}, 2, []int32{2, 5}},
		{"the trailing occurrence is not a match", nil, []int32{1, 2, 3}, 2, nil},
		{"history continuation stops at its end", nil, []int32{7, 7, 7}, 3, []int32{7}},
		{"prediction before history at the same length", []int32{1, 2, 99}, []int32{1, 2, 3, 1, 2}, 1, []int32{99}},
		{"longer history match before shorter prediction match", []int32{2, 99}, []int32{1, 2, 3, 1, 2}, 1, []int32{3}},
		{"first occurrence ahead when no draft was taken yet", []int32{1, 9, 20, 1, 9, 30}, []int32{1, 9}, 1, []int32{20}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := draft(t, speculate.NewLookup(c.prediction), c.history, c.n)
			if !slices.Equal(got, c.want) {
				t.Fatalf("Draft = %v, want %v", got, c.want)
			}
		})
	}
}

// The history is read, never kept: changing it after the call changes
// nothing, and the drafts returned are the caller's.
func TestLookupDoesNotAlias(t *testing.T) {
	l := speculate.NewLookup([]int32{1, 2, 3, 4})
	h := []int32{5, 1, 2}
	got := draft(t, l, h, 2)
	got[0] = 100
	h[2] = 7
	if again := draft(t, l, []int32{5, 1, 2}, 2); !slices.Equal(again, []int32{3, 4}) {
		t.Fatalf("Draft = %v after the caller changed its slices, want [3 4]", again)
	}
}

// refLookup is the rule NewLookup documents, by plain scanning: the
// reference its indexes are checked against.
type refLookup struct {
	pred        []int32
	prev        []int32
	pos, posLen int
	placed      bool
}

func (r *refLookup) draft(h []int32, n int) []int32 {
	if n <= 0 || len(h) == 0 {
		return nil
	}
	L := len(h)
	if len(h) >= len(r.prev) && slices.Equal(h[:len(r.prev)], r.prev) && r.placed {
		r.pos += L - r.posLen
	}
	r.posLen, r.prev = L, slices.Clone(h)
	for k := min(4, L); k >= 1; k-- {
		suf := h[L-k:]
		best := -1
		for e := k; e < len(r.pred); e++ {
			if !slices.Equal(r.pred[e-k:e], suf) {
				continue
			}
			dist := func(x int) int { return max(x-r.pos, r.pos-x) }
			if best < 0 || dist(e) <= dist(best) { // ascending e: a tie goes to the later
				best = e
			}
		}
		if best >= 0 {
			r.pos, r.placed = best, true
			return slices.Clone(r.pred[best:min(best+n, len(r.pred))])
		}
		for e := L - 1; e >= k; e-- {
			if slices.Equal(h[e-k:e], suf) {
				return slices.Clone(h[e:min(e+n, L)])
			}
		}
	}
	return nil
}

// Over random sequences of calls (a small vocabulary, so matches abound;
// histories that grow by taken drafts and other tokens, and now and then
// are replaced), the indexed drafter answers as the scanning reference.
func TestLookupMatchesReference(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 0))
		vocab := int32(2 + r.IntN(6))
		tok := func() int32 { return r.Int32N(vocab) }
		pred := make([]int32, r.IntN(80))
		for i := range pred {
			pred[i] = tok()
		}
		l := speculate.NewLookup(pred)
		ref := &refLookup{pred: pred}
		h := []int32{tok()}
		for call := range 150 {
			n := 1 + r.IntN(8)
			got, want := draft(t, l, h, n), ref.draft(h, n)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d call %d: Draft(len %d, %d) = %v, want %v", seed, call, len(h), n, got, want)
			}
			switch x := r.IntN(10); {
			case x == 0: // a history that does not extend the last
				h = slices.Clone(h[:r.IntN(len(h))])
				h = append(h, tok())
			default: // a verified loop: some drafts taken, then one token
				h = append(h, got[:r.IntN(len(got)+1)]...)
				h = append(h, tok())
			}
		}
	}
}

// A reply that repeats its prediction is drafted almost entirely from
// it, even when the prediction repeats itself (code: the same short lines
// again and again), because the drafter follows its place in the
// prediction instead of jumping to another occurrence: every loop takes
// γ+1 tokens. An edit in the reply costs at most three loops more.
func TestLookupFollowsPrediction(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	// Lines of 6 tokens from a few templates over 20 tokens.
	templates := [][]int32{{1, 2, 3, 4, 5, 0}, {1, 2, 6, 7, 5, 0}, {8, 3, 4, 5, 9, 0}, {1, 2, 3, 4, 5, 0}}
	var pred []int32
	for range 150 {
		line := slices.Clone(templates[r.IntN(len(templates))])
		line[3] = 10 + r.Int32N(10) // a varying token per line
		pred = append(pred, line...)
	}
	edited := slices.Clone(pred)
	for i := 50; i < len(edited); i += 97 {
		edited[i] = 19 - edited[i]%5 // a few edits
	}
	for _, c := range []struct {
		name      string
		reply     []int32
		maxLoops  int // a loop yields at most gamma+1 = 9 tokens: 900 need 100
		wantEdits int
	}{
		{"verbatim", pred, 100, 0},
		{"edited", edited, 100 + 3*9, 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			const gamma = 8
			l := speculate.NewLookup(pred)
			prompt := []int32{30, 31, 32}
			reply := c.reply[:1]
			accepted, loops := 0, 0
			for len(reply) < len(c.reply) {
				loops++
				d := draft(t, l, append(slices.Clone(prompt), reply...), gamma)
				k := 0
				for k < len(d) && len(reply)+k < len(c.reply) && d[k] == c.reply[len(reply)+k] {
					k++
				}
				accepted += k
				reply = c.reply[:min(len(reply)+k+1, len(c.reply))]
			}
			t.Logf("%d tokens in %d loops, %d drafts accepted", len(c.reply), loops, accepted)
			if edits := diff(pred, c.reply); edits != c.wantEdits {
				t.Fatalf("test setup: %d edits, want %d", edits, c.wantEdits)
			}
			if loops > c.maxLoops {
				t.Fatalf("%d loops for %d tokens, want at most %d (%d edits, three loops each)", loops, len(c.reply), c.maxLoops, c.wantEdits)
			}
		})
	}
}

func diff(a, b []int32) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// A prediction longer than MaxPredictionTokens is indexed up to it.
func TestLookupLongPrediction(t *testing.T) {
	pred := make([]int32, speculate.MaxPredictionTokens+10)
	for i := range pred {
		pred[i] = int32(i % 50000)
	}
	pred[speculate.MaxPredictionTokens-2] = 77777
	pred[speculate.MaxPredictionTokens-1] = 1
	pred[speculate.MaxPredictionTokens] = 88888
	pred[speculate.MaxPredictionTokens+1] = 2
	l := speculate.NewLookup(pred)
	if got := draft(t, l, []int32{77777}, 2); !slices.Equal(got, []int32{1}) {
		t.Fatalf("Draft after a token at the index's end = %v, want [1]", got)
	}
	if got := draft(t, l, []int32{88888}, 2); got != nil {
		t.Fatalf("Draft after a token past the index = %v, want none", got)
	}
}

func TestLookupHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, err := speculate.NewLookup([]int32{1, 2}).Draft(ctx, []int32{1}, 1); err == nil {
		t.Fatalf("Draft with a cancelled context = %v, nil; want its error", got)
	}
}
