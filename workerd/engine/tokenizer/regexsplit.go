package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2"
)

// Pre-tokenizers that llama.cpp runs through std::regex rather than a
// hand-written splitter are run here the same way: an ECMAScript
// backtracking engine over the same transformed text. For a pattern with
// Unicode classes, llama.cpp first "collapses" the text to one byte per
// code point (ASCII kept, whitespace to \v, other code points to a byte
// naming their category: \xD1 number, \xD2 letter, \xD3 punctuation,
// \xD4 mark, \xD5 symbol, \xD0 anything else) and rewrites \p{N}, \p{L},
// \p{P}, \p{M}, \p{S} into classes of that byte and the category's ASCII
// members. Without Unicode classes the pattern runs on the code points,
// with non-ASCII whitespace turned into \v. Match boundaries are then
// mapped back to the original code points.

// asciiSpace is std::regex's \s for char and wchar_t in the C locale.
const asciiSpace = `\t\n\v\f\r `

var ucat = []struct {
	name  string
	code  rune
	ascii string
}{
	{`\p{N}`, 0xD1, `0-9`},
	{`\p{L}`, 0xD2, `A-Za-z`},
	{`\p{P}`, 0xD3, `!-#%-*,-/:-;?-@\[-\]_\{\}`},
	{`\p{M}`, 0xD4, ``},
	{`\p{S}`, 0xD5, `\$\+<->\^` + "`" + `\|`},
}

// collapseCpt is a code point's stand-in in collapsed text.
func collapseCpt(r rune) rune {
	switch {
	case r < 0x80:
		return r
	case isSpace(r):
		return '\v'
	case unicode.IsNumber(r):
		return 0xD1
	case unicode.IsLetter(r):
		return 0xD2
	case unicode.IsPunct(r):
		return 0xD3
	case unicode.IsMark(r):
		return 0xD4
	case unicode.IsSymbol(r):
		return 0xD5
	}
	return 0xD0
}

// rewritePattern turns llama.cpp's pattern into what its std::regex
// actually runs, spelt for regexp2: Unicode classes collapsed (when the
// pattern has any) and \s, \S made explicitly ASCII.
func rewritePattern(p string) (expr string, collapse bool) {
	for _, c := range ucat {
		if strings.Contains(p, c.name) {
			collapse = true
		}
	}
	var b strings.Builder
	inside := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p) && (p[i+1] == 's' || p[i+1] == 'S'):
			neg := p[i+1] == 'S'
			switch {
			case inside && !neg:
				b.WriteString(asciiSpace)
			case !inside && !neg:
				b.WriteString("[" + asciiSpace + "]")
			default: // \S, only ever outside a class in these patterns
				b.WriteString("[^" + asciiSpace + "]")
			}
			i++
		case c == '\\' && i+1 < len(p):
			if collapse && i+4 < len(p) && p[i+1] == 'p' && p[i+2] == '{' && p[i+4] == '}' {
				found := false
				for _, u := range ucat {
					if p[i:i+5] == u.name {
						if !inside {
							b.WriteByte('[')
						}
						fmt.Fprintf(&b, `\u%04X`, u.code)
						b.WriteString(u.ascii)
						if !inside {
							b.WriteByte(']')
						}
						found = true
						break
					}
				}
				if found {
					i += 4
					continue
				}
			}
			b.WriteByte(c)
			b.WriteByte(p[i+1])
			i++
		case c == '[':
			inside = true
			b.WriteByte(c)
		case c == ']' && inside:
			inside = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), collapse
}

// splitRegex is one of llama.cpp's std::regex pre-tokenizer patterns: in
// each segment, every match and every gap between matches is a word.
func splitRegex(pattern string) splitter {
	expr, collapse := rewritePattern(pattern)
	re := regexp2.MustCompile(expr, regexp2.ECMAScript)
	return func(cpts []rune, lens []int) []int {
		text := make([]rune, len(cpts))
		for i, r := range cpts {
			switch {
			case collapse:
				text[i] = collapseCpt(r)
			case r > 0x7F && isSpace(r):
				text[i] = '\v'
			default:
				text[i] = r
			}
		}
		var out []int
		start := 0
		for _, n := range lens {
			seg := text[start : start+n]
			start += n
			prev := 0
			for at := 0; at <= len(seg); {
				m, err := re.FindRunesMatchStartingAt(seg, at)
				if err != nil || m == nil {
					break
				}
				i, l := m.RuneIndex, m.RuneLength
				if i > prev {
					out = append(out, i-prev)
				}
				if l > 0 {
					out = append(out, l)
				}
				prev = i + l
				at = prev
				if l == 0 {
					at++ // an empty match: move on
				}
			}
			if prev < n {
				out = append(out, n-prev)
			}
		}
		return out
	}
}

// llama.cpp runs these two patterns with hand-written code, not std::regex.
const (
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	patternLlama3 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

func regexes(patterns ...string) pretokenizer {
	p := make(pretokenizer, len(patterns))
	for i, s := range patterns {
		switch s {
		case patternGPT2:
			p[i] = splitGPT2
		case patternLlama3:
			p[i] = splitLlama3(3)
		default:
			p[i] = splitRegex(s)
		}
	}
	return p
}

// The patterns, as llama.cpp lists them for each pre-tokenizer (from each
// model's published tokenizer configuration).
var (
	// Non-ASCII characters are escaped: several of these code points
	// have canonical equivalents that an editor could silently swap in.
	preDeepseekLLM = func() pretokenizer {
		return regexes(
			"[\r\n]",
			"\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+",
			"\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
			"\\s+$",
			"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
			"\\p{N}+",
		)
	}
	preDeepseekCoder = func() pretokenizer {
		return regexes("[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", "\\p{N}")
	}
	preDeepseekV3 = func() pretokenizer {
		return regexes(
			"\\p{N}{1,3}",
			"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
			"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
		)
	}
	preBloom = func() pretokenizer {
		return regexes(" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+")
	}
	preViking = func() pretokenizer {
		return regexes(" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", "\\p{N}")
	}
	preTekken = func() pretokenizer {
		return regexes("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
	}
	preChameleon = func() pretokenizer {
		return regexes(
			"<sentinel:[0-9]+>",
			"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
			"([\\t\\n]|    |  )",
			"\\p{N}",
			"[\\p{P}!-/:-@\\[-`{-~]",
			"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
		)
	}
	preGPT4o = func() pretokenizer {
		return regexes("[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
	}
)
