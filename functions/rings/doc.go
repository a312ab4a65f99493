// Package rings is the gateway's side of ring models (SPEC "Sharding"): a
// model too big for one contributor is served by a ring of workers
// ("members"), each holding a layer range of the model's signed shards
// (functions/shard). The gateway coordinates: it forms rings, registers
// the ring model on the first stage's connection so that jobs flow to it
// like to any worker, and settles each ring job by verifying every stage's
// signed receipt before anyone is paid. It is never on the activation path.
//
// # Formation
//
// A Former drives each ring model through these steps, over the relay's
// control messages (functions/relaymsg/ring.go):
//
//  1. Register: a worker lists ring models in its Register; the relay
//     accepts them without registering them as served, and Registered.Ring
//     names each with its manifest hash and blob URL (Offers).
//  2. ring_announce: the member's signed capability for the model and the
//     address other stages dial. Checked: the signature, that the signer is
//     the identity the connection connected with, that it names the
//     model's manifest hash, that the address is host:port, and that the
//     model has room (MaxCandidates).
//  3. With at least min_stages candidates and no ring, after Debounce of
//     quiet (every change of the candidates restarts the wait), each
//     candidate gets ring_probe with the others' addresses and answers with
//     its signed RTT row (ring_rtt). A lone candidate needs no probe.
//  4. With every row in, the gateway signs the plan parameters and its own
//     nominal RTT row (1 µs to every candidate: the gateway's hops are
//     nominal, so the plan does not price the loop's closing hop), runs
//     shard.NewPlan, and sends every plan member ring_assign.
//  5. Each member answers ring_ready with its signed acceptance (or
//     ring_refuse). When shard.CheckAccepted passes, the ring model is
//     added to the first stage's worker record, dispatch starts for it and
//     every member gets ring_serve.
//  6. A refusal, an invalid acceptance, a member leaving (Left), or a
//     member that misses a deadline (RTTTimeout for its row, ReadyTimeout
//     for its acceptance) voids the attempt: ring_disband to the members,
//     the ring model off the first stage's record, and a new attempt from
//     the candidates still connected — without the member at fault, for
//     that one attempt.
//
// Newcomers while a ring is assigned or serving wait as candidates for the
// next formation: a serving ring is not torn down for a faster one.
//
// # Settlement
//
// Settle turns a ring job's Done into the stages' shares of the earning:
// it finds the plan the job ran on among the model's recent plans (the
// last RecentPlans served, so a member that left after the job is still
// paid), checks the Done came from that plan's first stage, signs the job
// record as the plan's coordinator with the attempt's nonce
// (relaymsg.RingNonce of its ticket), and runs shard.Verify. Any failure
// pays nobody and is a *shard.RejectedError.
//
// # Limits
//
// State is in memory: the Former must run in the one process that handles
// the relay's events (the local relay, infra/relay) and answers the API's
// dispatch and settlement, as the dev stack does. The gateway runs without
// a chain: jobs carry slot 0 and a zero blockhash, and Verify gets no block
// table. At most MaxAttempt candidates take part in one attempt, so that
// the assignment, which carries every participant's capability and RTT
// row, fits one relay message.
//
// Privacy: nothing here sees prompt or completion text; logs carry model
// ids, connection ids, keys, hashes and reasons only.
package rings
