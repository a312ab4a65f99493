package oaiwire

import "unicode/utf8"

// AppendString appends s to dst as a JSON string, byte for byte what
// encoding/json's Marshal writes for it (FuzzAppendDelta holds the two
// together): ", \ and the control characters \n, \r, \t, \b, \f as
// two-byte escapes; the other control characters and <, > and & as \u00XX;
// each byte of invalid UTF-8 as \ufffd; U+2028 and U+2029 as \u2028 and
// \u2029; everything else as it is.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0 // s[start:i] is still to copy
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(append(dst, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(append(dst, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigit[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(dst, s[start:]...), '"')
}

const hexDigit = "0123456789abcdef"

// MaxKeptBuffer is the largest buffer a caller of AppendDelta keeps for
// the next delta. One grown past it by an unusually large delta (up to six
// times a message's size, when every byte is escaped) is dropped after use,
// so one huge delta from a peer is not held for a whole stream.
const MaxKeptBuffer = 64 << 10

// KeepBuffer is b to keep for the next delta, or nil when it grew past
// MaxKeptBuffer.
func KeepBuffer(b []byte) []byte {
	if cap(b) > MaxKeptBuffer {
		return nil
	}
	return b
}

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
