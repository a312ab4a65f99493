package oaiwire

import (
	"encoding/json"
	"unicode/utf8"
)

// AppendString appends s to dst as a JSON string, byte for byte what
// encoding/json's Marshal writes for it. Text made only of characters
// Marshal writes as they are (printable ASCII other than ", \, <, > and &,
// and valid UTF-8 other than U+2028 and U+2029) is appended in place;
// anything else is left to Marshal, so every escape is Marshal's own.
func AppendString(dst []byte, s string) []byte {
	if !plain(s) {
		b, _ := json.Marshal(s) // a string always marshals
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plain reports whether Marshal writes s between its quotes unchanged.
func plain(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
			return false
		}
		i += size
	}
	return true
}

// MaxKeptBuffer is the largest buffer a caller of AppendDelta keeps for
// the next delta. One grown past it by an unusually large delta (up to six
// times a message's size, when every byte is escaped) is dropped after use,
// so one huge delta from a peer is not held for a whole stream.
const MaxKeptBuffer = 64 << 10

// AppendDelta appends d's JSON to dst, byte for byte what Marshal writes
// for it, and reports true, when d carries no tool calls (a token's text,
// or the role); for a delta with tool calls it returns dst unchanged and
// false, and the caller marshals it.
func AppendDelta(dst []byte, d Delta) ([]byte, bool) {
	if len(d.ToolCalls) > 0 {
		return dst, false
	}
	dst = append(dst, '{')
	n := len(dst)
	dst = appendField(dst, n, `"role":`, d.Role)
	dst = appendField(dst, n, `"content":`, d.Content)
	dst = appendField(dst, n, `"reasoning_content":`, d.Reasoning)
	return append(dst, '}'), true
}

// appendField appends one omitempty string field of an object whose first
// field would start at dst[start].
func appendField(dst []byte, start int, name, v string) []byte {
	if v == "" {
		return dst
	}
	if len(dst) > start {
		dst = append(dst, ',')
	}
	dst = append(dst, name...)
	return AppendString(dst, v)
}
