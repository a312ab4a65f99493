package tokenizer

import "fmt"

// bpeBigram is a candidate merge; the lowest rank goes first, then the
// leftmost.
type bpeBigram struct {
	left, right int
	text        string
	rank        int
}

func bpeFirst(a, b bpeBigram) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.left < b.left
}

// encodeBPE appends the byte-level BPE tokens of text, as llama.cpp's
// llm_tokenizer_bpe_session does: pre-tokenize into words, merge each
// word by rank, and fall back to single-byte tokens for what is left.
func (t *Tokenizer) encodeBPE(text string, out []int32) []int32 {
	var syms []symbol
	var key []byte
	q := &queue[bpeBigram]{less: bpeFirst}
	for _, word := range preTokenize(t.pre, text) {
		syms = syms[:0]
		q.reset()
		if t.ignoreMerges {
			if id, ok := t.ids[word]; ok {
				out = append(out, id)
				continue
			}
		}
		syms = splitSymbols(word, syms)
		str := func(i int) string { return word[syms[i].start : syms[i].start+syms[i].n] }
		tryAdd := func(left, right int) {
			if left < 0 || right < 0 {
				return
			}
			l, r := str(left), str(right)
			key = append(append(append(key[:0], l...), ' '), r...)
			m, ok := t.ranks[string(key)]
			if !ok || int(m.split) != len(l) { // "a b c" is ("a", "b c"), not ("a b", "c")
				return
			}
			q.push(bpeBigram{left: left, right: right, text: l + r, rank: int(m.rank)})
		}
		for i := 1; i < len(syms); i++ {
			tryAdd(i-1, i)
		}
		for q.Len() > 0 {
			b := q.pop()
			l, r := &syms[b.left], &syms[b.right]
			if l.n == 0 || r.n == 0 || str(b.left)+str(b.right) != b.text {
				continue // stale
			}
			l.n += r.n
			r.n = 0
			l.next = r.next
			if r.next >= 0 {
				syms[r.next].prev = b.left
			}
			tryAdd(l.prev, b.left)
			tryAdd(b.left, l.next)
		}
		for i := range syms {
			if syms[i].n == 0 {
				continue
			}
			s := str(i)
			if id, ok := t.ids[s]; ok {
				out = append(out, id)
				continue
			}
			for j := 0; j < len(s); j++ {
				if id, ok := t.ids[s[j:j+1]]; ok {
					out = append(out, id)
				}
			}
		}
	}
	return out
}

// byteToRune is GPT-2's byte-level alphabet: printable bytes stand for
// themselves, the others for code points from U+0100 on.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	keep := func(c int) bool {
		return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)
	}
	n := 0
	for c := range 256 {
		if keep(c) {
			b2r[c] = rune(c)
		} else {
			b2r[c] = rune(256 + n)
			n++
		}
		r2b[b2r[c]] = byte(c)
	}
	return b2r, r2b
}()

// decodeByteLevel maps a byte-level BPE token back to bytes, marking code
// points outside the alphabet as llama.cpp does.
func decodeByteLevel(text string) []byte {
	var out []byte
	for _, c := range cptsFromUTF8(text) {
		if b, ok := runeToByte[c]; ok {
			out = append(out, b)
			continue
		}
		out = append(out, "[UNK_BYTE_0x"...)
		for _, x := range appendCpt(nil, c) {
			out = fmt.Appendf(out, "%02x", x)
		}
		out = append(out, text...)
		out = append(out, ']')
	}
	return out
}
