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
//     address other stages dial. Checked: that the connection's worker
//     record and its identity's reputation are in good standing (neither
//     quarantined nor banned: CodeStanding), the signature, that the signer
//     is the identity the connection connected with, that it names the
//     model's manifest hash, that the address is host:port — and, unless
//     Config.AllowPrivateAddrs (a dev network), a public IP literal — and
//     that the model has room (MaxCandidates). An announcement that repeats
//     the connection's last one (the same capability but for its time and
//     signature, the same address) changes nothing; one that changes it
//     counts at most once per ChangeInterval (CodeRateLimited). A newer
//     connection of an identity that is a candidate on another one (the
//     member rolled its relay connection) replaces it; a plan the identity
//     holds a place in is void, and the old connection's disconnect then
//     changes nothing. An older connection cannot take the place back.
//  3. With at least min_stages candidates and no ring, after Debounce of
//     quiet (every change of the candidates restarts the wait, but an
//     attempt starts at most MaxWait after they first reached
//     min_stages, and past MaxWait a probe runs to its end unless one of
//     its own participants changes), each candidate gets ring_probe with
//     the others' addresses and answers with its signed RTT row
//     (ring_rtt). A lone candidate needs no probe. An attempt leaves out
//     the candidates excluded from it, those benched by Rejected, and
//     those not in good standing, read from the store at each attempt
//     (nothing tells the Former when a verdict changes a standing).
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
//     that one attempt. At the RTT deadline the member at fault is the one
//     nobody could reach, when the rows that came show one: a candidate
//     that no row from another participant lists (a row lists only the
//     peers its member reached, so the honest are late because they are
//     still dialling an unreachable address, while its owner answers at
//     once). Only when no row shows such a candidate are the late ones
//     left out. A standby or verifier that leaves a serving ring does not
//     void it: only primaries carry its jobs.
//
// Newcomers while a ring is assigned or serving wait as candidates for the
// next formation: a serving ring is not torn down for a faster one.
//
// # Settlement
//
// Settle turns a ring job's Done into the stages' shares of the earning:
// it finds the plan the job was dispatched with among the model's recent
// plans (the last RecentPlans served, so a member that left after the job
// is still paid), without waiting for formation, checks the Done came from
// that plan's first stage and names that plan, signs the job record as the
// plan's coordinator with the attempt's nonce (relaymsg.RingNonce of its
// ticket), runs shard.Verify, and requires every stage's identity to be in
// good standing. Any failure pays nobody and is a *shard.RejectedError;
// the Settlement names the Culprit, the member held to account (see
// Culprit.Strike for when its identity is to be struck). The caller passes
// it to Rejected, which voids a plan the culprit holds a place in and
// benches its identity from formations for Exclusion.
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
