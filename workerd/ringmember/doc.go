// Package ringmember is what a workerd process runs as a member of a
// ring: a model split by layers over several members (functions/shard),
// each holding a layer range loaded from its signed blobs
// (workerd/shardblob), passing activations member to member over direct,
// mutually authenticated stage connections (workerd/stagenet). The relay
// carries only the ring's control (functions/relaymsg ring messages).
//
// # Roles
//
// A Server serves one plan at a time (Serve; Drop or a later Serve ends
// it). This member's place is found in the plan by its identity key.
// Only a primary assignment is served: a standby or verifier assignment
// is held (its plan's members may connect, to probe) but takes no frame
// and dials nothing; taking over a stage is not implemented yet.
//
// Stage 0's primary is the ring's driver. It holds the embedding, and the
// tokenizer and chat template from the embedding blob's metadata, and
// runs the token loop (Server.Chat) with builtin.Text.Generate, the loop
// the built-in backend runs: for any request the ring's reply is the
// built-in backend's on the whole model file, token for token, within the
// plan's context (Assignment.ContextTokens, the positions every stage
// reserved memory for: the driver cuts a reply to fit, refuses a prompt
// that does not, and every stage refuses a frame past it). A job whose
// context ends mid-reply (the agent's reply deadline) is still closed
// around the ring, under a short context of the driver's own, so the
// reply sent so far settles: Chat returns the ring's account with the
// context's error. Close waits for the Chat calls under way, which end
// promptly once the ring is stopped, so the layers they read can be
// closed after it.
//
// # Membership
//
// A Member is the control side (the relay's ring messages, through the
// agent). Because a Server serves one plan at a time, a Member holds — or
// takes — a plan of one ring model at a time: an assignment of another
// model meanwhile is refused with ring_refuse code "busy". Each model has
// at most one assignment, one probe and one announce loop under way; a
// newer one of its kind cancels the one before, a disband of its plan
// cancels an assignment, and a new relay connection (Attach) cancels all
// three. An assignment checks that it is still its model's current one
// before it serves and before it says ready, so a voided plan never
// replaces a newer one; pulls into one model's blob cache run one at a
// time. A probe dials every peer at once and retries each a few times
// within one deadline (MemberConfig.ProbeTimeout, well under the
// gateway's wait for the rows), leaving unreachable peers out of its row.
//
// A probe also times each peer's bench layer (bench.go): the model's
// middle layer k = len(Layers)/2, which every candidate pulled to measure
// itself and keeps open. The member sends benchRuns KindBench frames of
// random one-token hidden states, computes the same Forward itself, and
// requires each KindBenchReply to equal its own result bit for bit; the
// peer's observed layer time, the least of (round trip − baseline), goes
// into the row (RTTPeer.LayerMicros), the baseline being the least of the
// pings and of TCP connects (which the peer's kernel answers, so a peer
// cannot look faster by delaying its pongs). The planner prices the peer
// at the median of what its peers observed, not at its claim. A peer
// whose reply differs, or that answers no bench, is left out of the row
// like an unreachable one. A connection may send at most MaxBenchPerConn bench
// frames; each is exactly one token of the model's hidden size, in F32,
// at position 0.
// Attach keeps serving the plans held — the agent keeps the connection
// it replaces until its jobs are done, and the gateway disbands or
// replaces a plan itself — and announces on the new connection again
// with backoff until a probe or an assignment of the model comes, since a
// refused announce is answered with an error the member does not see.
// Handle returns at once: what takes time runs in goroutines of its own.
//
// # Connections
//
// Stage s's primary dials stage s+1's; the last stage dials stage 0, which
// closes the loop at the driver. A member dials its next stage at Serve
// and redials with backoff while it serves; it accepts only its previous
// stage's data frames. The listener admits the current plan's members and
// the keys Allow names (a probe's peers); a connection from anyone else
// but the previous stage answers pings and bench frames (Probe,
// ProbeBench) and is closed on its first data frame.
//
// # A job
//
// One job runs on a ring at a time. The driver sends KindOpen (JSON: job
// id, plan, nonce, slot, blockhash, the prompt's length and the sampling
// settings; never text) with Step 0; every stage starts a fresh KV cache
// for the job and passes the Open on; the last stage keeps a sampler.
// Each step the driver embeds the step's tokens (the prompt in chunks of
// at most MaxChunk positions, then one token), runs its layers and sends
// KindHidden (engine.EncodeHidden F32, exact) with the step and the first
// position; each stage runs its layers and passes the states on; the
// last stage applies the head to the last position, samples (with
// workerd/engine/sample, as the built-in backend does) and sends the
// token back to the driver in a KindTokens frame with the same step and
// the new cache length. A prompt chunk before the prompt's last is
// answered with an empty KindTokens frame, which keeps the driver in
// lockstep without a sample (so a seeded sampler draws exactly what the
// built-in backend draws). KindTruncate rolls every cache back to Pos;
// the last stage acknowledges it with an empty KindTokens frame. The
// driver ends a job with KindClose: every stage appends its signed
// receipt to the Close's JSON array and passes it on, the last stage
// back to the driver, which adds its own and returns relaymsg.RingDone.
//
// # Speculative decoding
//
// After the prompt, a driver with a drafter (speculation.go: the
// model's --draft choice, the request's prediction first; none when the
// job says NoSpeculation) may send, instead of one token's KindHidden, a
// KindVerify frame: the drafts' ids (1 to speculate.MaxGamma) and the
// hidden states of the last token and every draft, at the cache's length.
// Each stage runs every row and passes the drafts on with its states;
// the last stage applies the head to every row and accepts drafts with
// the job's sampler (speculate.Accept), truncates its cache to the rows
// accepted and answers a KindTokens frame with the accepted drafts and
// the token after them, at the accepted length. The driver checks that
// every accepted token is its draft and the position fits, and truncates
// its own cache. The other stages keep every row until the next data
// frame, whose position — at least the verify's first row plus one, at
// most the cache's length — says how many stay (stageJob.rewind); any
// other frame's position must be the cache's length. The chains take
// verify frames like any other, and a receipt counts every row a stage
// ran, rejected drafts included. γ, the drafts per loop, comes from a
// speculate.Controller the ring keeps across jobs; the loops are counted
// in Server.SpecStats.
//
// Every frame is checked: the job id is the open job's, Step strictly
// increases, a hidden frame's Pos is the stage's cache length, payloads
// are within bounds (hidden states: hidden size × 4 × MaxChunk plus the
// wire header; the Open's JSON: 4 KiB, validated; a Close: 2 KiB a
// receipt), token ids are inside the vocabulary. A frame that breaks the
// protocol ends its job, never the member: the stage passes a KindError
// on toward the driver, which fails the job, as it does when a stage's
// connection ends or a step's answer does not come within the step
// timeout. A failed or abandoned job is dropped around the ring the same
// way. The driver fails a job that an error frame ended with a fixed
// reason (ErrStageFailed): a peer's text goes into no error, log or
// Fail message.
//
// # Receipts
//
// Each member keeps two hash chains per job over the data frames (Hidden,
// Tokens, Truncate): in, over what it received, and out, over what it
// sent, each h' = SHA-256(h ‖ kind ‖ step ‖ pos ‖ SHA-256(payload)) from
// 32 zero bytes. The driver's in chain is over the tokens it fed its own
// embedding (as if it had received them as tokens frames), and is
// RingDone.Input; RingDone.Output is its chain over the tokens frames the
// last stage sent back. So receipt[s].Output is receipt[s+1].Input, the
// first receipt's Input is the job's input and the last one's Output the
// job's output: shard.Verify's chain check. A receipt covers token
// positions [0, n), n being the positions the stage ran (truncations
// notwithstanding), carries the Open's nonce, slot and blockhash, and is
// signed with the member's identity key.
//
// Nothing here logs or sends prompt or reply text: logs name jobs, steps,
// positions and sizes; error frames carry this package's own reasons.
package ringmember
