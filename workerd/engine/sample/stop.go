package sample

import "strings"

// Stopper ends a generation at the first stop string, as the OpenAI API
// defines stop: the text before it is returned, the stop string and all
// after it are not. Text that might be the start of a stop string is held
// back until the next delta settles it, so no delta ever shows part of a
// stop string. Feed it complete UTF-8 (a tokenizer.Decoder's output): a
// held-back suffix is then always whole characters.
//
// A Stopper is for one generation and not safe for concurrent use.
type Stopper struct {
	stops   []string
	held    string
	stopped bool
}

// NewStopper returns a Stopper for stops; empty strings are ignored.
func NewStopper(stops []string) *Stopper {
	s := &Stopper{}
	for _, x := range stops {
		if x != "" {
			s.stops = append(s.stops, x)
		}
	}
	return s
}

// Add takes the next delta of generated text and returns what may be
// shown now, and whether a stop string was reached (then the generation
// should end and later calls return nothing).
func (s *Stopper) Add(text string) (emit string, stopped bool) {
	if s.stopped {
		return "", true
	}
	buf := s.held + text
	// The stop string completed first wins, as if text came one byte at
	// a time (so the result does not depend on how deltas are cut); of
	// two ending at the same place, the longer.
	cut, end := -1, -1
	for _, x := range s.stops {
		if i := strings.Index(buf, x); i >= 0 && (end < 0 || i+len(x) < end || i+len(x) == end && i < cut) {
			cut, end = i, i+len(x)
		}
	}
	if cut >= 0 {
		s.held, s.stopped = "", true
		return buf[:cut], true
	}
	keep := 0 // longest suffix of buf that begins some stop string
	for _, x := range s.stops {
		for n := min(len(x)-1, len(buf)); n > keep; n-- {
			if strings.HasSuffix(buf, x[:n]) {
				keep = n
				break
			}
		}
	}
	s.held = buf[len(buf)-keep:]
	return buf[:len(buf)-keep], false
}

// Flush returns the text held back when the generation ends for another
// reason (EOS, max tokens).
func (s *Stopper) Flush() string {
	out := s.held
	s.held = ""
	return out
}

// Stopped reports whether a stop string was reached.
func (s *Stopper) Stopped() bool { return s.stopped }
