// Package attack is the gateway's attack suite: its tests play a hostile
// worker and a hostile client against the real gateway — the local relay
// (infra/relay, API Gateway's contract), the relay function
// (functions/relayroutes), the API and its relay listener, dispatch and
// the store, embedded or DynamoDB (C0MPUTE_STORE=dynamodb) — next to honest
// participants: the real workerd agent in process, in front of a scripted
// backend. The package holds no code but its tests; this file is their map.
//
// # Threat model: who can send what to whom
//
// Client → API. Anyone with an account (accounts are free to make) holds up
// to five API keys and sends any HTTP it likes to the OpenAI-compatible API:
// any body, as fast or as slowly as it likes, keeping connections open,
// reading replies slowly or not at all. It sees its own completion ids. It
// may also run workers itself, on its own account.
//
// Worker → relay. Anyone with a worker token (one API call away) connects
// to the relay's worker address with a signed connect and, once
// registered, is handed jobs: each Job message names the job id, the API
// listener connection the reply goes to (ReplyTo), the request and a
// ticket. Over its connection it can send anything: chunk, done and fail
// for any job id and any destination, with any ticket, seq and usage
// claim; messages only the relay or a listener should send; garbage,
// floods and frames of any size. It cannot choose its connection id.
//
// Relay → listener. The relay stamps each worker message with its sender
// (From) and posts it to a listener; the API trusts that stamp, so the
// relay must forward only a job's own worker's messages (the ticket: an
// HMAC of job, worker connection and listener) and must never fail, refund
// or cancel a job because of a message from someone else. What the
// listener and the API hold for a job is bounded whatever the worker
// sends.
//
// Anyone → the relay's worker address. Unauthenticated HTTP can reach the
// address workers dial: upgrade requests (signed or not, trickled or
// replayed) and any other path. The @connections management API (post to,
// inspect or close any connection) is not served there; it has an address
// of its own and takes only SigV4-signed calls made with the gateway's
// credentials.
//
// # Findings and the tests that prove them fixed
//
//  1. Free ride: the user's own worker sends, for the user's job on an
//     honest worker, a chunk that cannot be re-encoded under 128 KB; the
//     relay used to fail the job as "listener gone" and refund it while
//     the honest reply still arrived. TestFreeRideOversizedChunk (four
//     growing payloads: HTML escapes, U+2028, invalid UTF-8, the relay's
//     own From stamp; own, absent, forged and altered tickets);
//     TestOversizedChunkOwnJob (the same chunk for the sender's own job
//     cuts the sender off; its job moves or is refunded; an honest job in
//     flight is untouched).
//  2. Gateway crash on usage claims (completion_tokens of 2^62, MaxInt64,
//     negative): TestHugeUsageClaims, in a child process so that a crash
//     fails it alone; stored tokens and measured speeds stay within what
//     was relayed.
//  3. Management API on the worker address: TestManagementFromWorkerPort
//     (GET/POST/DELETE on /@connections/{id} and /local/@connections/{id}
//     for the listener's and a worker's connection, unsigned and signed
//     with foreign credentials: refused, no effect);
//     TestManagementNeedsSignature (the management address itself refuses
//     unsigned, fake-signed and foreign-signed calls with 403).
//  4. Dispatch monopoly from a speed claim: TestSpeedClaimMonopoly (a
//     worker that claimed 1,000,001 tokens for one delta; the honest
//     worker still gets a fair share of 40 jobs).
//  5. Refund after full delivery: TestDeadlineHonestSlowWorker (a slow
//     honest worker ends with finish_reason "length" before the deadline,
//     charged and paid); TestDeadlineHostileStreamsPast (a worker that
//     streams on past the point where the gateway gives up and never
//     sends done: one error event, one refund, no pay).
//  6. Memory exhaustion: TestFloodOutOfOrder (seq 0 held back, 800 × 100 KB
//     after it) and TestFloodFasterThanClientReads (in order, faster than
//     the client reads): past a bound the job ends, refunded once, and the
//     worker is cut off unpaid. The API's heap is logged, never asserted.
//  7. Rate limit bypass with several keys: TestRateLimitAcrossKeys (five
//     keys, one account limit; the rate-limit headers on 200 and 429,
//     Retry-After on 429).
//  8. Slow clients: TestSlowClients (a trickled body, trickled headers and
//     an idle keep-alive connection to the API, a trickled upgrade to the
//     relay: closed after the servers' shortened timeouts).
//  9. (a) TestUserFieldNeverReachesWorker: the request's user field, the
//     account id and the API key never reach a worker. (b)
//     TestConnectionsPerTokenCapped: store.MaxConnsPerToken live
//     connections per token, the next refused with a 4xx. (c)
//     TestSilentWorker: a worker that never answers loses the job to an
//     honest one after the first-token timeout and is cut off; the user
//     is charged once. (d) TestConnectSignatureReplay: replayed, stale and
//     mismatched connect signatures are refused. (e) TestRevokeRacingConnect:
//     a token revoked while its connection is in $connect (where the
//     revoke's disconnect cannot reach it) is refused at registration and
//     the connection closed.
//  10. Retries onto a dead worker: TestRetryOntoDeadWorker (a worker whose
//     connection is gone but whose record is still idle — held so by a
//     store wrapper — does not burn the job's only attempt).
//  11. Pay for unproven work: a worker is paid only for a done carrying a
//     receipt signed by the identity it connected with that names the
//     job and model and hashes the request sent and the reply relayed.
//     TestDoneWithoutReceipt (the relay cannot read the done and cuts the
//     sender off; the job ends with one error event); TestReceiptSignedByAnotherKey
//     (a receipt of another key's, and one naming the worker's key but
//     signed by another); TestReceiptOutputMismatch (an output hash or a
//     delta count that is not what was streamed, streamed and not: one
//     error event, or a 502); TestReceiptReplayed (an earlier job's valid
//     receipt). Each job is refunded once, no receipt is kept for it, the
//     worker earns nothing for it and is cut off.
//
// Found in review: TestMovedAwayWorkerFloods (a worker the job moved
// away from floods it under its old ticket: dropped, the honest reply
// arrives whole, charged, its worker paid and still connected).
// TestMovedJobAnsweredBeforeThePostReturns (the worker a job moved to
// answers it whole before the gateway's post to it returns: the reply is
// taken, not dropped as another sender's).
//
// Verified work (issue 12; the cheaters behind the real workerd are
// infra/cheat's): TestHugeUsageClaims and TestSpeedClaimMonopoly (a usage
// claim above what was relayed is rejected, refunded, unpaid, and
// quarantines its worker); TestImpossibleSpeed (64 tokens at once: faster
// than MaxTokPerSec, rejected the same way); TestCapabilitiesDecideDispatch
// (tools when no online worker has them: a 400 at once, free; with one
// that has them, the job goes there); TestBannedWorkerRefused (a banned
// identity, and a fresh one on its token: 403 saying banned);
// TestWorkersView (a contributor's workers with standing, counts and
// earnings; nobody else's; offline when gone).
//
// Further attacks: TestForeignJobMessages (chunk, done and fail for
// another worker's job, with the sender's own, an altered, a forged or no
// ticket, or addressed to a worker: each refused with an error reply, the
// victim's reply intact); TestWrongSequenceNumbers (duplicate, negative
// and far-ahead seqs); TestForgedRelayMessages (assign, lost, welcome, job,
// cancel, hello, registered and error sent by a worker);
// TestStaleTicketAfterRequeue (the worker a job moved away from cannot
// inject into or end it with its still-valid ticket); TestOversizedFrame
// (a frame over 128 KB closes the connection with 1009);
// TestHeartbeatAndGarbageFlood (other users are served throughout).
//
// # Running
//
//	go test -race ./infra/attack/
//	C0MPUTE_STORE=dynamodb C0MPUTE_DYNAMODB_ENDPOINT=http://127.0.0.1:8000 go test -race ./infra/attack/
//
// C0MPUTE_ATTACK_LOG=1 writes the gateway's logs to stderr. Deadlines are
// shortened to seconds (testLimits); every wait is on a condition with a
// bound, and no test asserts a duration.
package attack
