package listener

import (
	"errors"
	"testing"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// A mailbox holds a bounded backlog: past mailboxMessages or mailboxBytes
// unread, what it holds is dropped and ErrOverflow is all that is left, so
// the request ends the job at its next look, and nothing later is kept.
func TestMailboxOverflow(t *testing.T) {
	tests := []struct {
		name  string
		n     int // messages put
		size  int // bytes each
		wantN int // messages popped before the end, ErrOverflow included
		over  bool
		text  bool // ended by the text bound: ErrFlooded
	}{
		{"under both bounds", mailboxMessages, 16, mailboxMessages, false, false},
		{"one message too many", mailboxMessages + 1, 16, 1, true, false},
		{"bytes past the bound", 9, mailboxBytes / 8, 1, true, true},
		{"a flood after the bound", 3 * mailboxMessages, 16, 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Mailbox{signal: make(chan struct{}, 1)}
			for i := range tt.n {
				b.put(&relaymsg.Chunk{Seq: int64(i)}, tt.size)
			}
			var got []any
			for m, ok := b.Pop(); ok; m, ok = b.Pop() {
				got = append(got, m)
			}
			if len(got) != tt.wantN {
				t.Fatalf("popped %d messages, want %d", len(got), tt.wantN)
			}
			last, isErr := got[len(got)-1].(error)
			if over := isErr && errors.Is(last, ErrOverflow); over != tt.over {
				t.Errorf("ended with %v; overflow %v, want %v", got[len(got)-1], over, tt.over)
			}
			if text := isErr && errors.Is(last, ErrFlooded); text != tt.text {
				t.Errorf("ended with %v; flooded %v, want %v", got[len(got)-1], text, tt.text)
			}
			if b.bytes != 0 {
				t.Errorf("%d bytes still counted after draining", b.bytes)
			}
			// Nothing is taken after an overflow.
			b.put(&relaymsg.Chunk{}, 1)
			if _, ok := b.Pop(); ok == tt.over {
				t.Errorf("a message after the end: taken %v, want %v", ok, !tt.over)
			}
		})
	}
}

// Once the mailbox knows the job's worker, another sender's chunk, done
// and fail messages are dropped before they count toward the bounds: a
// worker the job moved away from cannot fill it and get the current one
// blamed.
func TestMailboxTakesOnlyTheCurrentWorker(t *testing.T) {
	b := &Mailbox{signal: make(chan struct{}, 1)}
	b.Expect("B")
	for range 3 * mailboxMessages {
		b.put(&relaymsg.Chunk{From: "A"}, mailboxBytes/4)
		b.put(&relaymsg.Done{From: "A"}, 64)
		b.put(&relaymsg.Fail{From: "A"}, 64)
	}
	b.put(&relaymsg.Lost{Worker: "A"}, 64)
	b.put(&relaymsg.Chunk{From: "B"}, 16)
	var got []any
	for m, ok := b.Pop(); ok; m, ok = b.Pop() {
		got = append(got, m)
	}
	if len(got) != 2 {
		t.Fatalf("popped %d messages, want the lost and B's chunk: %v", len(got), got)
	}
	if c, ok := got[1].(*relaymsg.Chunk); !ok || c.From != "B" {
		t.Errorf("second message %#v, want B's chunk", got[1])
	}
}
