package speculate

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"sync"
	"unsafe"
)

// Lookup drafting (NewLookup) looks the last tokens of the sequence up in
// a reference and proposes what followed them there (prompt-lookup
// decoding).
const (
	// maxNgram is the longest suffix looked up: four tokens pin a place in
	// code or prose well; longer ones rarely add a match four missed.
	maxNgram = 4
	// minNgram is the shortest. One token is weak evidence, but on a ring
	// a rejected draft costs one more row in a loop whose price is mostly
	// the network hops, and the Controller shortens γ when guesses keep
	// failing; longer suffixes are always tried first.
	minNgram = 1
	// MaxPredictionTokens is the most tokens of a prediction NewLookup
	// indexes: more than any ring's context, so no reply can use the rest,
	// and it bounds a request's index (12 bytes per token).
	MaxPredictionTokens = 1 << 17
)

// lookup is the prompt-lookup Drafter of one request (NewLookup).
//
// Both indexes are by the last token of a k-gram, so one index serves
// every k: a k-gram's occurrences are among its last token's, checked
// token by token. A lookup costs at most a scan of that token's
// occurrences per k (O(len), as the contract allows), usually a few
// steps, and indexing costs no hashing of k-grams.
type lookup struct {
	mu sync.Mutex

	pred []int32
	// predKeys holds, for every end e in [1, len(pred)) (a token follows
	// pred[:e]), pred[e-1]<<32 | e, sorted: each token's ends are one
	// ascending run.
	predKeys []uint64
	// pos is where the history's end is expected in pred, if the reply
	// follows the prediction: the end of the occurrence drafted from
	// last, advanced by every token the history gained since (posLen is
	// the history's length pos refers to). placed says a draft was taken
	// from pred yet; before that pos is 0.
	pos, posLen int
	placed      bool

	// hist is a copy of the history indexed. For every end e in
	// [1, len(hist)) (a token follows), histPrev[e] is the previous end
	// with the same last token hist[e-1] (0: none), and histLast maps a
	// token to its latest such end: a chain of each token's ends, latest
	// first. The end len(hist) (the suffix looked up) is never indexed,
	// so no suffix matches itself.
	hist     []int32
	histPrev []int32
	histLast map[int32]int32
}

// NewLookup returns a Drafter that proposes continuations found by n-gram
// lookup, first in prediction (the request's predicted output: text the
// reply is expected to repeat largely, e.g. a file being edited), then in
// the history itself. prediction is copied; its tokens past
// MaxPredictionTokens are ignored.
//
// Draft(history, n) tries the last k tokens of history for k from 4 down
// to 1; for each k it looks first in the prediction, then in the history
// before its last token, and proposes up to n tokens that followed the
// first match found:
//
//   - in the prediction, the occurrence that ends nearest to where the
//     history's end is expected in it (the later on a tie): the end of
//     the occurrence the previous draft from the prediction was taken at,
//     advanced by the tokens the history gained since, since a reply that
//     follows its prediction moves through it in step; before any draft
//     from the prediction, the first occurrence;
//   - in the history, the latest earlier occurrence.
//
// The rule depends on the calls before only through that expected place,
// so a request's drafts are deterministic. Work per call is bounded: the
// prediction is indexed once (a sort, here), and the history's index is
// extended by the tokens added since the previous call (a history that
// does not extend the previous one is indexed anew); a lookup scans at
// most the occurrences of the history's last token, and each call
// compares the history with the indexed copy (a linear scan of memory).
// A call allocates only its result and the index's growth.
//
// It is safe for concurrent use, though a request's driver calls it from
// one goroutine.
func NewLookup(prediction []int32) Drafter {
	if len(prediction) > MaxPredictionTokens {
		prediction = prediction[:MaxPredictionTokens]
	}
	l := &lookup{pred: slices.Clone(prediction), histLast: make(map[int32]int32)}
	if len(l.pred) > 1 {
		l.predKeys = make([]uint64, 0, len(l.pred)-1)
		for e := 1; e < len(l.pred); e++ {
			l.predKeys = append(l.predKeys, uint64(uint32(l.pred[e-1]))<<32|uint64(e))
		}
		slices.Sort(l.predKeys)
	}
	return l
}

// Draft returns up to n tokens proposed to follow history (see NewLookup),
// or none when no suffix of it is found.
func (l *lookup) Draft(ctx context.Context, history []int32, n int) ([]int32, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if n <= 0 || len(history) == 0 {
		return nil, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	extended := l.indexHistory(history)
	L := len(history)
	if extended && l.placed {
		l.pos += L - l.posLen
	}
	l.posLen = L
	for k := min(maxNgram, L); k >= minNgram; k-- {
		suffix := history[L-k:]
		if e, ok := l.inPrediction(suffix); ok {
			l.pos, l.placed = e, true
			return slices.Clone(l.pred[e:min(e+n, len(l.pred))]), nil
		}
		if e, ok := l.inHistory(suffix); ok {
			return slices.Clone(history[e:min(e+n, L)]), nil
		}
	}
	return nil, nil
}

// inPrediction returns the end of the occurrence of suffix in the
// prediction to draft from: the one nearest to pos, the later on a tie.
func (l *lookup) inPrediction(suffix []int32) (int, bool) {
	k := len(suffix)
	t := uint64(uint32(suffix[k-1])) << 32
	lo := sort.Search(len(l.predKeys), func(i int) bool { return l.predKeys[i] >= t })
	hi := lo + sort.Search(len(l.predKeys)-lo, func(i int) bool { return l.predKeys[lo+i] >= t+1<<32 })
	run := l.predKeys[lo:hi] // the ends after suffix's last token, ascending
	end := func(i int) int { return int(uint32(run[i])) }
	matches := func(e int) bool { return e >= k && slices.Equal(l.pred[e-k:e], suffix) }
	// Walk outwards from pos, nearest first; on equal distance the later.
	after := sort.Search(len(run), func(i int) bool { return end(i) >= l.pos })
	before := after - 1
	for after < len(run) || before >= 0 {
		if after < len(run) && (before < 0 || end(after)-l.pos <= l.pos-end(before)) {
			if e := end(after); matches(e) {
				return e, true
			}
			after++
		} else {
			if e := end(before); matches(e) {
				return e, true
			}
			before--
		}
	}
	return 0, false
}

// inHistory returns the end of the latest earlier occurrence of suffix in
// the indexed history.
func (l *lookup) inHistory(suffix []int32) (int, bool) {
	k := len(suffix)
	for e := int(l.histLast[suffix[k-1]]); e > 0; e = int(l.histPrev[e]) {
		if e >= k && slices.Equal(l.hist[e-k:e], suffix) {
			return e, true
		}
	}
	return 0, false
}

// indexHistory brings the history index up to date with history: it
// extends it when history extends the indexed copy (and says so), else
// rebuilds it.
func (l *lookup) indexHistory(history []int32) (extended bool) {
	extended = len(history) >= len(l.hist) && sameTokens(history[:len(l.hist)], l.hist)
	if !extended {
		l.hist, l.histPrev = l.hist[:0], l.histPrev[:0]
		clear(l.histLast)
	}
	from := max(len(l.hist), 1) // ends before from are indexed
	l.hist = append(l.hist, history[len(l.hist):]...)
	for len(l.histPrev) < from {
		l.histPrev = append(l.histPrev, 0) // end 0 has no token before it
	}
	for e := from; e < len(l.hist); e++ {
		t := l.hist[e-1]
		l.histPrev = append(l.histPrev, l.histLast[t])
		l.histLast[t] = int32(e)
	}
	return extended
}

// sameTokens is slices.Equal for token slices, as one memory comparison
// of their bytes: the check that a 32k-token history extends the indexed
// one is then a few microseconds, most of a lookup's time otherwise.
// Equal int32 values have equal bytes and no padding lies between them.
func sameTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	asBytes := func(s []int32) []byte {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*4)
	}
	return bytes.Equal(asBytes(a), asBytes(b))
}
