package tokenizer

import "unicode/utf8"

// Decoder turns generated tokens into text incrementally. A token may end
// in the middle of a UTF-8 character (byte tokens, byte-level BPE pieces):
// the Decoder holds such an unfinished character back until the tokens
// that complete it arrive, so no delta ever splits a character. Bytes
// that can never become valid UTF-8 are passed on as they are.
//
// A Decoder is for one generation and not safe for concurrent use.
type Decoder struct {
	t       *Tokenizer
	pending []byte
}

// NewDecoder returns a Decoder over t's pieces.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Add appends token id's piece and returns the text that is now complete.
func (d *Decoder) Add(id int32) string {
	d.pending = append(d.pending, d.t.Piece(id)...)
	n := completePrefix(d.pending)
	out := string(d.pending[:n])
	d.pending = append(d.pending[:0], d.pending[n:]...)
	return out
}

// Flush returns what is held back (an unfinished character) and resets
// the Decoder; call it when the generation ends.
func (d *Decoder) Flush() string {
	out := string(d.pending)
	d.pending = d.pending[:0]
	return out
}

// completePrefix is the length of b without a trailing incomplete UTF-8
// sequence: one whose lead byte announces more continuation bytes than
// follow it, where the bytes that do follow could still be its own.
func completePrefix(b []byte) int {
	// A sequence is at most 4 bytes: look back at most 3 for its lead.
	for back := 1; back <= 3 && back <= len(b); back++ {
		i := len(b) - back
		c := b[i]
		if c&0xC0 == 0x80 {
			continue // continuation byte: the lead is further back
		}
		if c < 0xC2 || c > 0xF4 {
			return len(b) // ASCII or a byte that starts nothing
		}
		if need := utf8Len(c); need > back && validSoFar(b[i:]) {
			return i
		}
		return len(b)
	}
	return len(b)
}

// validSoFar reports whether p, a lead byte and some continuation bytes,
// can still be completed into a valid UTF-8 character.
func validSoFar(p []byte) bool {
	var buf [4]byte
	n := copy(buf[:], p)
	// Complete it with the smallest continuation bytes allowed and ask.
	need := utf8Len(p[0])
	for i := n; i < need; i++ {
		buf[i] = 0x80
	}
	if utf8.Valid(buf[:need]) {
		return true
	}
	// E0 A0.., ED 80.., F0 90.., F4 80..: the second byte is constrained;
	// when it is still missing, any allowed one completes it.
	if n == 1 {
		return true
	}
	for c := 0x80; c <= 0xBF; c++ {
		buf[n] = byte(c)
		for i := n + 1; i < need; i++ {
			buf[i] = 0x80
		}
		if utf8.Valid(buf[:need]) {
			return true
		}
	}
	return false
}
