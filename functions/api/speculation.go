package api

import (
	"net/http"
	"strings"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
)

// Speculative decoding on ring models (SPEC "Sharding"): a ring's driver
// drafts tokens (from a draft model, the context, or the request's
// prediction) and the ring verifies them in one loop; the output is the
// same as without drafts, token for token. The gateway's part is the
// client's switch (headerSpeculation, carried to the driver as
// relaymsg.RingJob.NoSpeculation) and the report of how the drafts fared
// (completion_tokens_details), which it bounds like every other claim.

// headerSpeculation is the request header that turns speculative decoding
// on (the default) or off for one chat request: "on" or "off", in any
// case, surrounding space ignored. Off is for a client measuring the ring
// itself, or ruling speculation out while chasing a problem; the reply is
// the same either way. A model that is not a ring takes the header and
// ignores it.
const headerSpeculation = "C0mpute-Speculation"

// errSpeculationHeader refuses a C0mpute-Speculation header that is
// neither on nor off, or is sent more than once.
func errSpeculationHeader() *oaiwire.Error {
	return oaiwire.InvalidRequest(headerSpeculation,
		`the C0mpute-Speculation header must be "on" or "off" (sent once; any case); leave it out for the default, "on". The request was not charged.`)
}

// speculationOff reads headerSpeculation: true when the client turned
// speculative decoding off; an *oaiwire.Error for a value it does not
// know.
func speculationOff(h http.Header) (bool, error) {
	vals := h.Values(headerSpeculation)
	switch len(vals) {
	case 0:
		return false, nil
	case 1:
	default:
		return false, errSpeculationHeader()
	}
	switch strings.ToLower(strings.TrimSpace(vals[0])) {
	case "on":
		return false, nil
	case "off":
		return true, nil
	}
	return false, errSpeculationHeader()
}

// ringDetails bounds the completion_tokens_details a ring's driver claims
// (how many drafted tokens the ring accepted and rejected) for a ring job
// whose stage receipts verified, given the usage already bounded
// (boundUsage) and the ring part of its done: no more accepted than the
// completion tokens, no more rejected than the token positions every stage
// signed for past the prompt (done.TokenEnd, which shard.Verify checked
// against every receipt), never negative. Nil stays nil: the field is
// omitted. These counts are a report to the client and never move money:
// they reach no store record, ledger entry or share; what a job costs and
// earns is set as without them (the request's price, and the completion
// tokens the store records).
func ringDetails(claim *oaiwire.CompletionTokensDetails, usage oaiwire.Usage, done *relaymsg.RingDone) *oaiwire.CompletionTokensDetails {
	if claim == nil || done == nil {
		return nil
	}
	return &oaiwire.CompletionTokensDetails{
		AcceptedPredictionTokens: min(max(claim.AcceptedPredictionTokens, 0), usage.CompletionTokens),
		RejectedPredictionTokens: min(max(claim.RejectedPredictionTokens, 0), max(done.TokenEnd-usage.PromptTokens, 0)),
	}
}
