package tokenizer

// symbol is a run of the text being merged, in a doubly linked chain.
type symbol struct {
	start, n   int // bytes of the text
	prev, next int // chain indices, -1 at the ends
}

func splitSymbols(text string, syms []symbol) []symbol {
	syms = syms[:0]
	for off := 0; off < len(text); {
		n := min(utf8Len(text[off]), len(text)-off)
		i := len(syms)
		s := symbol{start: off, n: n, prev: i - 1, next: i + 1}
		off += n
		if off == len(text) {
			s.next = -1
		}
		syms = append(syms, s)
	}
	return syms
}

// spmBigram is a candidate merge of two adjacent symbols; the highest
// score goes first, then the leftmost.
type spmBigram struct {
	left, right int
	score       float32
	size        int
}

func spmFirst(a, b spmBigram) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	return a.left < b.left
}

// encodeSPM appends the SentencePiece tokens of text (spaces already
// escaped as "▁"), as llama.cpp's llm_tokenizer_spm_session does.
func (t *Tokenizer) encodeSPM(text string, out []int32) []int32 {
	syms := splitSymbols(text, nil)
	q := &queue[spmBigram]{less: spmFirst}
	tryAdd := func(left, right int) {
		if left < 0 || right < 0 {
			return
		}
		s := text[syms[left].start : syms[left].start+syms[left].n+syms[right].n]
		id, ok := t.ids[s]
		if !ok {
			return
		}
		q.push(spmBigram{left: left, right: right, score: t.scores[id], size: len(s)})
	}
	for i := 1; i < len(syms); i++ {
		tryAdd(i-1, i)
	}
	for q.Len() > 0 {
		b := q.pop()
		l, r := &syms[b.left], &syms[b.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != b.size {
			continue // stale: one side was merged since
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
	for i := 0; i != -1 && len(syms) > 0; i = syms[i].next {
		s := text[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.ids[s]; ok {
			out = append(out, id)
			continue
		}
		// A merged symbol is always a token, so this is one character the
		// vocabulary lacks: its bytes as byte tokens.
		for j := 0; j < len(s); j++ {
			out = append(out, t.byteToken(s[j]))
		}
	}
	return out
}

// byteToken is the SentencePiece token of one byte: <0xNN>, else the byte
// itself as a token, else (where llama.cpp would abort) the unknown token.
func (t *Tokenizer) byteToken(c byte) int32 {
	const hex = "0123456789ABCDEF"
	if id, ok := t.ids[string([]byte{'<', '0', 'x', hex[c>>4], hex[c&15], '>'})]; ok {
		return id
	}
	if id, ok := t.ids[string([]byte{c})]; ok {
		return id
	}
	return t.unk
}
