package relaymsg

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// A ticket binds a job to the one worker connection it was handed to and to
// the listener that holds its client: HMAC-SHA256, under a key only the
// gateway holds, of the job id, the worker's connection id and the
// listener's. The API puts it in the Job message; the worker copies it into
// every chunk, done and fail of that job; the relay recomputes it with the
// connection the message actually came from. A worker therefore cannot
// address, advance, finish or fail a job it does not hold, nor reach a
// listener for any other job — and the check costs the relay no store read.
//
// A ticket outlives a requeue (the old worker's ticket still verifies for
// its own connection); the listener drops messages from any worker but the
// job's current one, and the store's conditions (Complete, Fail) are keyed
// on the assigned worker, so a stale ticket moves nothing.

// TicketLen is the length of a ticket: 32 bytes, base64url without padding.
const TicketLen = 43

// Ticketer issues and checks tickets under one key.
type Ticketer struct{ key []byte }

// NewTicketer derives the ticket key from the gateway's listener secret, so
// the API and the relay function, which both hold that secret, agree on it
// without another secret to deploy. The derivation separates the uses: a
// ticket reveals nothing about the secret that listeners present.
func NewTicketer(secret string) *Ticketer {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("c0mpute-job-ticket:v1"))
	return &Ticketer{key: m.Sum(nil)}
}

// Issue returns the ticket of a job handed to worker, replying to listener.
func (t *Ticketer) Issue(job, worker, listener string) string {
	return base64.RawURLEncoding.EncodeToString(t.mac(job, worker, listener))
}

// Valid reports whether ticket was issued for this job, worker and listener.
func (t *Ticketer) Valid(ticket, job, worker, listener string) bool {
	got, err := base64.RawURLEncoding.DecodeString(ticket)
	if err != nil || len(ticket) != TicketLen {
		return false
	}
	return hmac.Equal(got, t.mac(job, worker, listener))
}

func (t *Ticketer) mac(job, worker, listener string) []byte {
	m := hmac.New(sha256.New, t.key)
	// Length-prefixed fields: no two different triples encode the same.
	for _, f := range []string{job, worker, listener} {
		var n [4]byte
		n[0], n[1], n[2], n[3] = byte(len(f)>>24), byte(len(f)>>16), byte(len(f)>>8), byte(len(f))
		m.Write(n[:])
		m.Write([]byte(f))
	}
	return m.Sum(nil)
}
