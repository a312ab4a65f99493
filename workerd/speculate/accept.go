package speculate

import (
	"errors"
	"fmt"

	"github.com/c0mpute/c0mpute/workerd/engine"
	"github.com/c0mpute/c0mpute/workerd/engine/sample"
)

// Accept verifies drafted tokens against the target's logits, as the
// ring's last stage does once per verification loop. lg holds one row per
// position of the batch [pending, drafts...]: row i is the target's
// scores for the token after the batch's i-th position, so row 0 judges
// drafts[0], row len(drafts) follows the last draft.
//
// For i = 0, 1, … the request's own sampler draws x_i from row i; drafts[i]
// is accepted while it equals x_i, and the first x_i that differs (or the
// draw after the last draft) ends the loop. The result is x_0..x_k: the
// k accepted drafts followed by one token of the target's own, so it
// always holds at least one token, and x_i == drafts[i] for i < k. See
// the package documentation for why this keeps the target's distribution
// and, for a given seed, its exact tokens.
//
// Accept refuses a row count other than len(drafts)+1, more than MaxGamma
// drafts, and drafts outside the vocabulary, with an error that names the
// counts: each is a caller's bug, and nothing is sampled then.
func Accept(smp *sample.Sampler, lg *engine.Logits, drafts []int32) ([]int32, error) {
	if smp == nil {
		return nil, errors.New("speculate: accept: no sampler")
	}
	if lg == nil {
		return nil, errors.New("speculate: accept: no logits")
	}
	if len(drafts) > MaxGamma {
		return nil, fmt.Errorf("speculate: accept: %d drafts, at most %d (MaxGamma) are verified in one loop", len(drafts), MaxGamma)
	}
	if lg.Tokens != len(drafts)+1 {
		return nil, fmt.Errorf("speculate: accept: %d rows of logits for %d drafts, want %d (one for the pending token, one per draft)", lg.Tokens, len(drafts), len(drafts)+1)
	}
	if lg.Vocab <= 0 || len(lg.Data) != lg.Tokens*lg.Vocab {
		return nil, fmt.Errorf("speculate: accept: %d logit values for %d rows of a vocabulary of %d", len(lg.Data), lg.Tokens, lg.Vocab)
	}
	for i, d := range drafts {
		if d < 0 || int(d) >= lg.Vocab {
			return nil, fmt.Errorf("speculate: accept: draft %d is token %d, outside the vocabulary of %d", i, d, lg.Vocab)
		}
	}
	out := make([]int32, 0, len(drafts)+1)
	for i := 0; i <= len(drafts); i++ {
		x := smp.Sample(lg.Row(i))
		out = append(out, x)
		if i == len(drafts) || x != drafts[i] {
			break
		}
	}
	return out, nil
}
