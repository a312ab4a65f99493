package tokenizer

import (
	"strings"
	"unicode"
)

// A splitter cuts each segment (a run of code points, given by its length)
// into smaller segments. A pre-tokenizer is a list of them applied in turn,
// as llama.cpp applies its list of regular expressions.
type splitter func(cpts []rune, lens []int) []int

type pretokenizer []splitter

type preSpec struct {
	split        pretokenizer
	ignoreMerges bool // a word that is a token is not merged
	addBOS       bool // default for tokenizer.ggml.add_bos_token
	noBOS        bool // no default BOS token
}

var (
	preLlama3    = pretokenizer{splitLlama3(3)}
	preQwen2     = pretokenizer{splitLlama3(1)}
	preGPT2      = pretokenizer{splitGPT2}
	preStarcoder = pretokenizer{splitEach(isNumber), splitGPT2}
	preDefault   = pretokenizer{
		splitRuns(func(r rune) bool { return isPunct(r) || strings.ContainsRune("$+<=>^~|", r) }),
		splitGPT2,
		splitRuns(isNumber),
		splitASCIIDigits3,
	}
	preFalcon = pretokenizer{
		splitRuns(func(r rune) bool { return isPunct(r) || strings.ContainsRune("$+<=>^~|`", r) }),
		splitGPT2,
		splitASCIIDigits3,
	}
)

// preFor is llama.cpp's choice of pre-tokenizer by tokenizer.ggml.pre.
func preFor(name string) (preSpec, error) {
	switch name {
	case "llama3", "llama-v3", "llama-bpe", "falcon3":
		return preSpec{split: preLlama3, ignoreMerges: true, addBOS: true}, nil
	case "dbrx", "smaug-bpe":
		return preSpec{split: preLlama3}, nil
	case "chatglm-bpe":
		return preSpec{split: preLlama3, noBOS: true}, nil
	case "qwen2", "deepseek-r1-qwen", "stablelm2", "megrez":
		return preSpec{split: preQwen2}, nil
	case "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
		"jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais":
		return preSpec{split: preGPT2}, nil
	case "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b":
		return preSpec{split: preStarcoder}, nil
	case "falcon":
		return preSpec{split: preFalcon}, nil
	case "deepseek-llm":
		return preSpec{split: preDeepseekLLM()}, nil
	case "deepseek-coder":
		return preSpec{split: preDeepseekCoder()}, nil
	case "deepseek-v3":
		return preSpec{split: preDeepseekV3()}, nil
	case "poro-chat", "bloom", "gpt3-finnish":
		return preSpec{split: preBloom()}, nil
	case "viking":
		return preSpec{split: preViking()}, nil
	case "tekken":
		return preSpec{split: preTekken(), ignoreMerges: true, addBOS: true}, nil
	case "chameleon":
		return preSpec{split: preChameleon(), addBOS: true}, nil
	case "gpt-4o":
		return preSpec{split: preGPT4o()}, nil
	}
	// llama.cpp warns and uses its default for a missing or unknown name.
	return preSpec{split: preDefault}, nil
}

// preTokenize splits text into words, each in GPT-2's byte-level alphabet.
func preTokenize(p pretokenizer, text string) []string {
	cpts := cptsFromUTF8(text)
	if len(cpts) == 0 {
		return nil
	}
	lens := []int{len(cpts)}
	for _, s := range p {
		lens = s(cpts, lens)
	}
	words := make([]string, 0, len(lens))
	var raw []byte
	var b strings.Builder
	start := 0
	for _, n := range lens {
		raw = raw[:0]
		for _, c := range cpts[start : start+n] {
			raw = appendCpt(raw, c)
		}
		start += n
		b.Reset()
		for _, c := range raw {
			b.WriteRune(byteToRune[c])
		}
		words = append(words, b.String())
	}
	return words
}

// cptsFromUTF8 decodes code points as llama.cpp's unicode_cpts_from_utf8
// does: by the lead byte's high bits, with no check for overlong forms or
// surrogates, and U+FFFD for each byte that starts no sequence. Code points
// above U+10FFFF (on which llama.cpp aborts) also become U+FFFD.
func cptsFromUTF8(s string) []rune {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xC0 == 0x80 }
		switch {
		case c&0x80 == 0:
			out = append(out, rune(c))
			i++
		case c&0x40 == 0:
			out = append(out, 0xFFFD)
			i++
		case c&0x20 == 0:
			if !cont(1) {
				out, i = append(out, 0xFFFD), i+1
				continue
			}
			out = append(out, rune(c&0x1F)<<6|rune(s[i+1]&0x3F))
			i += 2
		case c&0x10 == 0:
			if !cont(1) || !cont(2) {
				out, i = append(out, 0xFFFD), i+1
				continue
			}
			out = append(out, rune(c&0x0F)<<12|rune(s[i+1]&0x3F)<<6|rune(s[i+2]&0x3F))
			i += 3
		case c&0x08 == 0:
			if !cont(1) || !cont(2) || !cont(3) {
				out, i = append(out, 0xFFFD), i+1
				continue
			}
			r := rune(c&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F)
			if r > 0x10FFFF {
				r = 0xFFFD
			}
			out = append(out, r)
			i += 4
		default:
			out = append(out, 0xFFFD)
			i++
		}
	}
	return out
}

// appendCpt encodes a code point as UTF-8 the way llama.cpp does, which
// (unlike package utf8) also encodes surrogates as themselves.
func appendCpt(b []byte, c rune) []byte {
	switch {
	case c <= 0x7F:
		return append(b, byte(c))
	case c <= 0x7FF:
		return append(b, 0xC0|byte(c>>6), 0x80|byte(c&0x3F))
	case c <= 0xFFFF:
		return append(b, 0xE0|byte(c>>12), 0x80|byte(c>>6&0x3F), 0x80|byte(c&0x3F))
	default:
		return append(b, 0xF0|byte(c>>18), 0x80|byte(c>>12&0x3F), 0x80|byte(c>>6&0x3F), 0x80|byte(c&0x3F))
	}
}

// Character classes, as llama.cpp's Unicode tables define \p{L}, \p{N},
// \p{P} and \s.
func isLetter(r rune) bool { return r < 0x80 && asciiLetter(r) || r >= 0x80 && unicode.IsLetter(r) }
func isNumber(r rune) bool {
	return r < 0x80 && '0' <= r && r <= '9' || r >= 0x80 && unicode.IsNumber(r)
}
func isPunct(r rune) bool { return unicode.IsPunct(r) }

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

func asciiLetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

func isSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return 0x2000 <= r && r <= 0x200A
}

// cursor reads one segment; positions outside it read as "no character".
type cursor struct {
	cpts       []rune
	start, end int
	lens       []int
	prev       int
}

func (c *cursor) at(i int) (rune, bool) {
	if i < c.start || i >= c.end {
		return 0, false
	}
	return c.cpts[i], true
}

func (c *cursor) is(i int, class func(rune) bool) bool {
	r, ok := c.at(i)
	return ok && class(r)
}

// other is [^\s\p{L}\p{N}] within the segment.
func (c *cursor) other(i int) bool {
	r, ok := c.at(i)
	return ok && !isSpace(r) && !isLetter(r) && !isNumber(r)
}

// cut ends a word at end and returns its length.
func (c *cursor) cut(end int) int {
	n := end - c.prev
	if n > 0 {
		c.lens = append(c.lens, n)
	}
	c.prev = end
	return n
}

// eachSegment runs f over every segment with a fresh cursor, collecting
// the words f cuts.
func eachSegment(cpts []rune, lens []int, f func(c *cursor)) []int {
	c := &cursor{cpts: cpts}
	start := 0
	for _, n := range lens {
		c.start, c.end, c.prev = start, start+n, start
		f(c)
		start += n
	}
	return c.lens
}

// spaceRun counts the whitespace from pos, and where the last \r or \n of
// it ends (0 if none).
func (c *cursor) spaceRun(pos int) (n, lastNL int) {
	for c.is(pos+n, isSpace) {
		if r, _ := c.at(pos + n); r == '\r' || r == '\n' {
			lastNL = pos + n + 1
		}
		n++
	}
	return n, lastNL
}

func contraction(c *cursor, pos int, lower func(rune) rune) int {
	if r, _ := c.at(pos); r != '\'' || pos+1 >= c.end {
		return 0
	}
	r1, _ := c.at(pos + 1)
	r1 = lower(r1)
	if r1 == 's' || r1 == 't' || r1 == 'm' || r1 == 'd' {
		return 2
	}
	if pos+2 < c.end {
		r2, _ := c.at(pos + 2)
		r2 = lower(r2)
		if r1 == 'r' && r2 == 'e' || r1 == 'v' && r2 == 'e' || r1 == 'l' && r2 == 'l' {
			return 3
		}
	}
	return 0
}

// splitGPT2 is 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+.
func splitGPT2(cpts []rune, lens []int) []int {
	same := func(r rune) rune { return r }
	return eachSegment(cpts, lens, func(c *cursor) {
		for pos := c.start; pos < c.end; {
			if n := contraction(c, pos, same); n > 0 {
				pos += c.cut(pos + n)
				continue
			}
			r, _ := c.at(pos)
			q := pos // the class is judged after an optional leading space
			if r == ' ' {
				q = pos + 1
			}
			if run := runClass(c, q); run != nil {
				pos = q
				for run(pos) {
					pos++
				}
				c.cut(pos)
				continue
			}
			n, _ := c.spaceRun(pos)
			if _, more := c.at(pos + n); n > 1 && more {
				pos += n - 1 // \s+(?!\S): leave the last space to the next word
				c.cut(pos)
				continue
			}
			if n > 0 {
				pos += n
				c.cut(pos)
				continue
			}
			pos++
			c.cut(pos)
		}
	})
}

// runClass returns the class of the run starting at q (letters, numbers or
// other), or nil.
func runClass(c *cursor, q int) func(int) bool {
	switch {
	case c.is(q, isLetter):
		return func(i int) bool { return c.is(i, isLetter) }
	case c.is(q, isNumber):
		return func(i int) bool { return c.is(i, isNumber) }
	case c.other(q):
		return c.other
	}
	return nil
}

// splitLlama3 is (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
// \p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ —
// llama-3's pattern with digits 3, qwen2's with 1.
func splitLlama3(digits int) splitter {
	return func(cpts []rune, lens []int) []int {
		return eachSegment(cpts, lens, func(c *cursor) {
			for pos := c.start; pos < c.end; {
				if n := contraction(c, pos, unicode.ToLower); n > 0 {
					pos += c.cut(pos + n)
					continue
				}
				r, _ := c.at(pos)
				if r != '\r' && r != '\n' && !isNumber(r) && (isLetter(r) || c.is(pos+1, isLetter)) {
					pos++
					for c.is(pos, isLetter) {
						pos++
					}
					c.cut(pos)
					continue
				}
				if isNumber(r) {
					ini := pos
					for c.is(pos, isNumber) {
						pos++
						if pos-ini >= digits {
							c.cut(pos)
							ini = pos
						}
					}
					c.cut(pos)
					continue
				}
				q := pos
				if r == ' ' {
					q = pos + 1
				}
				if _, in := c.at(q); !in && r == ' ' || c.other(q) {
					// A lone space at the segment's end lands here too,
					// as one word, which is what \s+ would give.
					pos = q
					for c.other(pos) {
						pos++
					}
					for c.is(pos, isNewline) {
						pos++
					}
					c.cut(pos)
					continue
				}
				n, lastNL := c.spaceRun(pos)
				if lastNL > 0 {
					pos = lastNL
					c.cut(pos)
					continue
				}
				if _, more := c.at(pos + n); n > 1 && more {
					pos += n - 1
					c.cut(pos)
					continue
				}
				if n > 0 {
					pos += n
					c.cut(pos)
					continue
				}
				pos++
				c.cut(pos)
			}
		})
	}
}

// splitRuns is [class]+: maximal runs of the class, and the gaps between
// them, become words.
func splitRuns(class func(rune) bool) splitter {
	return func(cpts []rune, lens []int) []int {
		return eachSegment(cpts, lens, func(c *cursor) {
			for pos := c.start; pos < c.end; {
				in := class(cpts[pos])
				for pos < c.end && class(cpts[pos]) == in {
					pos++
				}
				c.cut(pos)
			}
		})
	}
}

// splitEach is a one-character class pattern (\p{N}): each match is a word,
// and so is each gap between matches.
func splitEach(class func(rune) bool) splitter {
	return func(cpts []rune, lens []int) []int {
		return eachSegment(cpts, lens, func(c *cursor) {
			for pos := c.start; pos < c.end; {
				if class(cpts[pos]) {
					pos++
				} else {
					for pos < c.end && !class(cpts[pos]) {
						pos++
					}
				}
				c.cut(pos)
			}
		})
	}
}

// splitASCIIDigits3 is [0-9][0-9][0-9].
func splitASCIIDigits3(cpts []rune, lens []int) []int {
	digit := func(r rune) bool { return '0' <= r && r <= '9' }
	return eachSegment(cpts, lens, func(c *cursor) {
		for pos := c.start; pos < c.end; {
			if pos+3 <= c.end && digit(cpts[pos]) && digit(cpts[pos+1]) && digit(cpts[pos+2]) {
				pos += 3
				c.cut(pos)
				continue
			}
			pos++
			// Extend the gap up to the next match.
			for pos < c.end && !(pos+3 <= c.end && digit(cpts[pos]) && digit(cpts[pos+1]) && digit(cpts[pos+2])) {
				pos++
			}
			c.cut(pos)
		}
	})
}
