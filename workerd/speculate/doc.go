// Package speculate is speculative decoding for a ring (workerd/ringmember):
// how the driver drafts tokens, how many it drafts per loop, and how the
// last stage accepts them.
//
// # Why
//
// A ring decodes one token per loop around its stages, and a loop costs
// the network hops between them whatever it carries. Speculation makes a
// loop carry more: the driver drafts γ tokens d1..dγ cheaply, sends
// [pending, d1..dγ] around the ring once, and the last stage, which has
// the target's logits for all γ+1 rows, keeps the drafts the target agrees
// with and adds one token of its own. A loop then yields between 1 and
// γ+1 tokens; every stage rolls its KV cache back past the rejected rows.
//
// # Drafters
//
// A Drafter proposes the tokens after a sequence:
//
//   - NewLookup looks the sequence's last tokens up (4-grams down to
//     1-grams) in the request's prediction (OpenAI's Predicted Outputs:
//     text the reply will largely repeat) and in the sequence itself, and
//     proposes what followed them there. It costs microseconds and needs
//     no model.
//   - NewModel (OpenModel from a file) runs a small model of the same
//     vocabulary (SameVocabulary) greedily, keeping its KV cache across
//     calls; as a Prefetcher it drafts the next loop's tokens while the
//     current loop is in flight.
//
// ParseChoice reads which drafter a member uses per ring model (workerd's
// --draft).
//
// # Acceptance
//
// Every draft here is deterministic given the sequence: a point mass
// q = δ_d. For rows i = 0..γ in order, Accept lets the request's own
// sampler (workerd/engine/sample, seeded per request) draw x_i from row i
// of the target's logits; while x_i equals d_{i+1} the loop goes on, and
// the first x_i that differs, or x_γ, ends it. The output is x_0..x_k.
//
// This is the speculative-sampling rule of Leviathan et al. and Chen et
// al. for a point-mass proposal. There a draft d is accepted with
// probability min(1, p(d)/q(d)) = p(d), and on rejection the token is
// drawn from norm(max(0, p − q)), which for q = δ_d is p with d removed,
// renormalised. Drawing x ~ p and accepting iff x = d does exactly that:
// P(accept) = p(d), and given x ≠ d, x is distributed as p without d. So
// each output token has the target's distribution given the tokens before
// it, and the reply's distribution is the target's.
//
// It is more than equal in distribution. The sampler draws one random
// number per token it samples and nothing else, and row i's logits are
// the target's for the sequence the output has when x_i is drawn (the
// drafts before it were accepted, so they are the output). Hence x_0..x_k
// are the very tokens, from the very random numbers, that decoding one
// token per loop with the same seed would draw: a seeded reply is token
// for token the same with or without speculation, for any drafter, and a
// greedy one (temperature 0) is the target's greedy reply. Drafts change
// only how many loops the reply takes.
//
// # How many drafts
//
// The Controller picks γ per loop to maximise tokens per second: with
// acceptance α per draft (estimated from recent loops), a loop with γ
// drafts yields E = (1−α^(γ+1))/(1−α) tokens and costs T(γ) = a + b·(γ+1)
// + c·γ, a the loop's fixed cost (hops), b per row verified (both fitted
// on observed loops), c the drafting cost per token; it picks the γ that
// maximises E/T. When drafts are never accepted this is 0, with a probe of
// one draft now and then so it recovers when the text turns predictable.
// Stats counts the loops for metrics.
//
// Nothing in this package logs, stores or counts token text: drafts,
// histories and predictions are token ids that stay in memory.
package speculate
