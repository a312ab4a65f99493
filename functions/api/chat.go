package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/shard"
	"github.com/c0mpute/c0mpute/functions/store"
)

// chat serves POST /v1/chat/completions: admit (rate limit and debit in one
// store write), dispatch, relay the prompt to the worker in memory, stream
// the reply back, settle.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) error {
	// Counted under "other" until the model is known to be offered.
	rm := metricsOf(r.Context())
	rm.setModel(otherDim)
	req, err := oaiwire.DecodeChatRequest(r.Body)
	if err != nil {
		return err
	}
	noSpeculation, err := speculationOff(r.Header)
	if err != nil {
		return err
	}
	// The body is read: from here the request lives as long as its job may
	// (the server's read and write timeouts are sized for ordinary
	// requests, and Go cancels a request whose connection hits its read
	// deadline). Runtimes without deadlines (Lambda) answer
	// ErrNotSupported, which is fine.
	rc := http.NewResponseController(w)
	lifetime := time.Now().Add(s.limits.Job + deadlineGrace + time.Minute)
	_ = rc.SetReadDeadline(lifetime)
	_ = rc.SetWriteDeadline(lifetime)
	// The user field identifies the end user to the operator; a worker is
	// a stranger and must not learn who sent a prompt.
	req.User = ""
	model, ok := s.catalog.Resolve(req.Model)
	if !ok {
		return oaiwire.ModelNotFound(req.Model)
	}
	rm.setModel(model.ID)
	if model.Ring == nil {
		// Only a ring drafts from a prediction: other workers never see it
		// (an upstream server could refuse it, or bill it), and it takes
		// no room in the job message.
		req.Prediction = nil
	}
	if model.Image != nil {
		return oaiwire.InvalidRequest("model", model.ID+" is an image model: use POST /v1/images/generations. The request was not charged.")
	}
	needs := needsOf(req)
	if why, param := s.unservable(r.Context(), model.ID, needs); why != "" {
		return oaiwire.InvalidRequest(param, why+". The request was not charged.")
	}
	if _, canary := canaryOf(r); !canary {
		if err := s.unavailable(r, model.ID); err != nil {
			return err
		}
	}
	id := newCompletionID()
	job, box, err := s.admit(w, r, id, model, needs)
	if err != nil {
		return err
	}
	defer box.Close()
	p := who(r)
	now := job.Created
	if !job.Canary {
		w = s.withBalance(w, p.account)
	}
	var out sink
	if req.Stream {
		out = newStreamSink(w, job.ID, model.ID, now, req.IncludeUsage(), rm)
	} else {
		out = newBufferSink(w, job.ID, model.ID, now)
	}
	run := &jobRun{s: s, req: req, job: job, model: model, box: box, out: out, rm: rm, noSpeculation: noSpeculation}
	run.takeAdmitted()
	return run.serve(r.Context())
}

// admit opens a job's mailbox, then rate-limits the request and debits
// model's price in one store write, queueing the job with id and needs. It
// sets the rate-limit and cost headers; on an error (already in OpenAI's
// shape where the client is to blame) the mailbox is closed, else the
// caller closes it.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, id string, model catalog.Model, needs store.Needs) (store.Job, *listener.Mailbox, error) {
	conn, err := s.relay.Conn()
	if err != nil {
		s.log.Error("relay listener down", "err", err)
		return store.Job{}, nil, oaiwire.ErrNoWorker
	}
	// The mailbox opens before the job exists: from the moment Admit
	// queues it, any dispatcher may assign it and send the assignment here.
	box, err := s.relay.Subscribe(id, conn)
	if err != nil {
		s.log.Error("relay listener down", "err", err)
		return store.Job{}, nil, oaiwire.ErrNoWorker
	}
	p := who(r)
	now := s.now()
	window := now.Truncate(time.Minute)
	// Not the client's context: a client that hangs up while Admit is in
	// flight must not leave the debit's outcome unknown.
	admitCtx, cancelAdmit := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
	ar := store.AdmitRequest{
		KeyHash:      p.keyHash,
		Window:       window,
		Limit:        s.limits.RatePerMinute,
		AccountLimit: s.limits.AccountRatePerMinute,
		Job: store.Job{ID: id, AccountID: p.account, Model: model.ID, Price: model.Price,
			State: store.JobQueued, Listener: conn, Created: now, Updated: now, Needs: needs},
	}
	if spec, ok := canaryOf(r); ok {
		// The gateway's own check: its rate is the canary runner's to
		// set, and it may be aimed at one worker.
		ar.Job.Canary, ar.Job.Target = true, spec.target
		ar.Limit, ar.AccountLimit = canaryRateLimit, canaryRateLimit
	}
	// When a worker is idle, the dispatcher assigns the job in the same
	// write (the job comes back JobAssigned; jobRun.takeAdmitted).
	adm, err := s.dispatch.Admit(admitCtx, ar)
	cancelAdmit()
	s.rateHeaders(w.Header(), adm, err, window, now)
	if err == nil {
		w.Header().Set(headerCost, strconv.FormatInt(model.Price, 10))
	}
	if err != nil {
		box.Close()
	}
	switch {
	case errors.Is(err, store.ErrRateLimited):
		retry := int(window.Add(time.Minute).Sub(now).Seconds()) + 1
		return store.Job{}, nil, oaiwire.RateLimited(s.rateLimit(), retry)
	case errors.Is(err, store.ErrInsufficientCredits):
		return store.Job{}, nil, oaiwire.ErrInsufficientQuota
	case errors.Is(err, store.ErrKeyLimit):
		return store.Job{}, nil, s.keyLimit(r.Context(), p.keyHash, model.Price)
	case errors.Is(err, store.ErrExpired):
		s.keys.evict(p.keyHash)
		return store.Job{}, nil, errKeyExpired
	case errors.Is(err, store.ErrRevoked), errors.Is(err, store.ErrNotFound):
		s.keys.evict(p.keyHash)
		return store.Job{}, nil, oaiwire.ErrInvalidKey
	case err != nil:
		// A store error may hide a write that committed (a reply lost
		// after the SDK gave up): fail the job with a refund in case it
		// exists, so no one is charged for a job nobody waits for.
		s.settleFailure(id, "admit_error", true)
		return store.Job{}, nil, fmt.Errorf("admit: %w", err)
	}
	return adm.Job, box, nil
}

// headerCost is a chat response's price, in credits (debited at admission;
// a failure the user did not cause refunds it, as the ledger shows).
const headerCost = "x-c0mpute-cost-credits"

// canaryRateLimit is the canary account's request cap per minute: the
// runner paces itself.
const canaryRateLimit = 1 << 30

// storeTimeout bounds one store call made for a request whatever the
// client does meanwhile.
const storeTimeout = 10 * time.Second

// queueRecheck is how often a queued job tries to claim a worker itself.
const queueRecheck = 500 * time.Millisecond

// deadlineGrace is how long past the job's deadline the gateway still waits
// for the worker's last message: a worker ends its reply at the deadline
// (finish_reason "length"), and its done needs a moment to arrive.
const deadlineGrace = 5 * time.Second

// Bounds on what one worker can make the gateway hold for one job. Past
// any of them the worker broke the protocol (an honest one sends in order,
// at most a few messages ahead after the relay reorders, and far less text
// than this): it is cut off, earns nothing, and the job moves on or ends.
const (
	// maxAhead is how far past the next expected sequence number a
	// message may be; maxPending how many may wait for a gap to close.
	maxAhead   = 256
	maxPending = 256
	// maxPendingBytes bounds the text waiting for a gap to close.
	maxPendingBytes = 4 << 20
	// maxReplyBytes bounds a whole reply: a million tokens, the largest
	// max_tokens a request may ask for, are about 4 MB of text.
	maxReplyBytes = 8 << 20
)

// clientStall is how long one write to the client must have blocked for a
// mailbox overflow to be the client's doing (it stopped reading) rather than
// the worker's (it flooded faster than any client takes messages).
const clientStall = time.Second

// maxGoneRetries bounds the moves of a job away from workers whose
// connection turned out to be gone before the job reached them: those do
// not use up the job's attempts (the job never ran), but a store that keeps
// offering dead workers must not loop forever.
const maxGoneRetries = 16

// newCompletionID makes the id shared by the job and the OpenAI response.
func newCompletionID() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return "chatcmpl-" + base64.RawURLEncoding.EncodeToString(b)
}

// jobRun is one request's life after admission.
type jobRun struct {
	s     *Server
	req   *oaiwire.ChatRequest
	job   store.Job
	model catalog.Model
	box   *listener.Mailbox
	out   sink
	// rm is the request's measurements (nil for a canary).
	rm *requestMetrics

	worker       string // connection of the assigned worker
	seq          int64  // next expected message sequence from the worker
	pending      map[int64]any
	pendingBytes int
	firstAt      time.Time // first chunk from the worker
	attempts     int
	goneRetries  int
	// jobBytes is the size of the job message the worker received, the
	// bound of its prompt token claim.
	jobBytes int
	// deltas and replyBytes are what the gateway relayed from the
	// current worker: its own count, the bound of the worker's claims.
	deltas     int64
	replyBytes int64
	// postedAt is when the job was posted to the current worker.
	postedAt time.Time
	// slowestWrite is the longest one write of the reply to the client
	// took: a client that reads blocks no write for long.
	slowestWrite time.Duration
	// workerPubkey is the identity the store recorded for the current
	// worker at Assign: its receipt must be signed with that key.
	workerPubkey string
	// workerAccount is the current worker's account, which its earning
	// goes to (and whose stake boost sets its share).
	workerAccount string
	// output hashes what the gateway relayed from the current worker, as
	// the worker's receipt hashes what it sent; stats counts what its
	// text is made of, for the checks.
	output relaymsg.OutputHasher
	stats  replyStats
	// empties counts the workers whose reply to this job was empty.
	empties int
	// requestHash is the receipt's request_sha256 of req, once computed.
	requestHash string
	// excluded are workers this job may not go to again: they failed it.
	excluded map[string]bool
	// next is a worker the job was already assigned to when its last
	// worker failed it (moveNow).
	next string
	// ticket is the current attempt's job ticket (a ring job's nonce is
	// made from it); ringPlan the plan a ring job was sent to.
	ticket   string
	ringPlan shard.Hash
	// noSpeculation is the client's C0mpute-Speculation: off, for a ring
	// job's driver (headerSpeculation).
	noSpeculation bool
}

// takeAdmitted makes the worker the job was assigned to at admission (in
// the same store write: Dispatcher.Admit) the one waitForWorker takes.
func (j *jobRun) takeAdmitted() {
	if j.job.State == store.JobAssigned && j.job.Worker != "" {
		j.next, j.workerPubkey, j.workerAccount = j.job.Worker, j.job.WorkerPubkey, j.job.WorkerAccount
	}
}

// exclusions lists the workers the job may not be assigned to again.
func (j *jobRun) exclusions() []string {
	out := make([]string, 0, len(j.excluded))
	for w := range j.excluded {
		out = append(out, w)
	}
	return out
}

// outcome of waiting for a worker's reply.
type outcome int

const (
	outcomeDone outcome = iota
	outcomeRetry
	outcomeFailed
)

func (j *jobRun) serve(ctx context.Context) error {
	return j.attempt(ctx, j.runOnWorker, func() error { return j.out.fail(oaiwire.ErrWorkerLost) })
}

// attempt serves the job: it waits for a worker and runs the job on it
// with run, again on another while run says to retry, up to MaxAttempts;
// then the job fails, refunded, and lost is the answer.
func (j *jobRun) attempt(ctx context.Context, run func(jobCtx, clientCtx context.Context) (outcome, error), lost func() error) error {
	l := j.s.limits
	// No worker is assigned after the deadline; one that is has until the
	// deadline to end its reply, and deadlineGrace for its last message
	// to arrive.
	deadline := j.job.Created.Add(l.Job)
	queueCtx, cancelQueue := context.WithDeadline(ctx, deadline)
	defer cancelQueue()
	runCtx, cancelRun := context.WithDeadline(ctx, deadline.Add(deadlineGrace))
	defer cancelRun()
	for {
		j.attempts++
		if assigned, err := j.waitForWorker(queueCtx, ctx); !assigned {
			return err
		}
		res, err := run(runCtx, ctx)
		if res != outcomeRetry {
			return err
		}
		if j.attempts >= l.MaxAttempts {
			j.s.settleFailure(j.job.ID, "worker_lost", true)
			return lost()
		}
	}
}

// waitForWorker gets the job a worker: at once if one is idle, else when a
// dispatch elsewhere assigns it, until the queue wait runs out. When it
// returns false the job is settled and err is what the handler returns (nil
// once the answer is written).
func (j *jobRun) waitForWorker(jobCtx, clientCtx context.Context) (bool, error) {
	s := j.s
	waitFrom := s.now()
	defer func() { j.rm.waitedFor(s.now().Sub(waitFrom)) }()
	if j.next != "" { // moved at once to a worker already claimed
		j.worker, j.next = j.next, ""
		return true, nil
	}
	assigned, ok, err := s.dispatch.Assign(jobCtx, j.job, j.exclusions()...)
	if err != nil {
		return false, j.end(clientCtx, "store_error", fmt.Errorf("dispatch: %w", err))
	}
	if ok {
		j.worker, j.workerPubkey, j.workerAccount = assigned.Worker, assigned.WorkerPubkey, assigned.WorkerAccount
		return true, nil
	}
	queueWait := time.NewTimer(s.limits.QueueWait)
	defer queueWait.Stop()
	keepAlive := time.NewTimer(s.limits.KeepAliveAfter)
	defer keepAlive.Stop()
	// Dispatch events (registration, a worker turning idle) normally
	// assign a queued job and tell us. A function instance can die between
	// the two, or before dispatching at all, so a waiting job also looks
	// for itself: it claims an idle worker, or adopts an assignment whose
	// message never came.
	recheck := time.NewTicker(queueRecheck)
	defer recheck.Stop()
	for {
		for m, ok := j.box.Pop(); ok; m, ok = j.box.Pop() {
			switch m := m.(type) {
			case *relaymsg.Assign:
				// An assignment message may be stale (a dispatch that
				// raced a move): adopt it only as the store has it.
				if cur, err := s.store.GetJob(jobCtx, j.job.ID); err == nil && cur.State == store.JobAssigned &&
					cur.Worker == m.Worker && cur.Listener == j.job.Listener && !j.excluded[m.Worker] {
					j.worker, j.workerPubkey, j.workerAccount = m.Worker, cur.WorkerPubkey, cur.WorkerAccount
					return true, nil
				}
			case error:
				return false, j.end(clientCtx, "listener_lost", oaiwire.ErrInternal)
			}
		}
		select {
		case <-j.box.Ready():
		case <-keepAlive.C:
			j.out.keepAlive()
			keepAlive.Reset(s.limits.KeepAliveEvery)
		case <-recheck.C:
			switch job, ok := j.recheck(jobCtx); {
			case ok && job.State == store.JobAssigned && job.Listener == j.job.Listener:
				j.worker, j.workerPubkey, j.workerAccount = job.Worker, job.WorkerPubkey, job.WorkerAccount
				return true, nil
			case ok && job.State == store.JobFailed:
				// Failed elsewhere (settled already): only the answer is left.
				return false, j.end(clientCtx, job.FailReason, oaiwire.ErrNoWorker)
			}
		case <-queueWait.C:
			return false, j.end(clientCtx, "no_worker", oaiwire.ErrNoWorker)
		case <-jobCtx.Done():
			return false, j.end(clientCtx, "timeout", oaiwire.ErrTimeout)
		}
	}
}

// recheck claims an idle worker for a job that is still queued, and
// returns the job as it now stands; ok is false on a store error.
func (j *jobRun) recheck(ctx context.Context) (store.Job, bool) {
	job, claimed, err := j.s.dispatch.Assign(ctx, j.job, j.exclusions()...)
	if err == nil && !claimed {
		job, err = j.s.store.GetJob(ctx, j.job.ID)
	}
	if err != nil {
		j.s.log.Warn("queued job recheck", "job", j.job.ID, "err", err)
		return store.Job{}, false
	}
	return job, true
}

// end settles a job that stops before completion. A client that left gets
// no refund and no answer; otherwise the job is refunded (the user did not
// cause it) and the error goes to the client. The worker, if any, is told
// to stop.
func (j *jobRun) end(clientCtx context.Context, reason string, apiErr error) error {
	if j.worker != "" {
		j.cancelOnWorker()
	}
	if clientCtx.Err() != nil || reason == "client_gone" {
		j.s.settleFailure(j.job.ID, "client_gone", false)
		return nil
	}
	j.s.settleFailure(j.job.ID, reason, true)
	return j.out.fail(apiErr)
}

// runOnWorker hands the prompt to the worker and relays its reply.
func (j *jobRun) runOnWorker(jobCtx, clientCtx context.Context) (outcome, error) {
	s := j.s
	deadline := j.job.Created.Add(s.limits.Job)
	j.ticket = s.tickets.Issue(j.job.ID, j.worker, j.job.Listener)
	msg, err := relaymsg.Encode(&relaymsg.Job{Job: j.job.ID, ReplyTo: j.job.Listener, Model: j.model.ID,
		Request: *j.req, Deadline: deadline, BudgetMillis: max(deadline.Sub(s.now()).Milliseconds(), 0),
		Ticket: j.ticket, Ring: s.ringJob(j, j.ticket)})
	if err != nil {
		// The prompt cannot fit in one relay message: the user's input,
		// but refused before any work, so refunded.
		if j.req.Prediction != nil {
			return outcomeFailed, j.end(clientCtx, "too_large", oaiwire.InvalidRequest("prediction",
				"the request is too large to relay to a worker (limit 128 KiB once encoded, messages and prediction together): shorten the prediction or the messages"))
		}
		return outcomeFailed, j.end(clientCtx, "too_large", oaiwire.InvalidRequest("messages",
			"the request is too large to relay to a worker (limit 128 KiB once encoded)"))
	}
	if posted, res, err := j.post(jobCtx, clientCtx, msg); !posted {
		return res, err
	}
	j.seq, j.pending, j.pendingBytes, j.firstAt = 0, map[int64]any{}, 0, time.Time{}
	j.deltas, j.replyBytes, j.output, j.stats = 0, 0, relaymsg.OutputHasher{}, replyStats{}
	firstToken := time.NewTimer(s.limits.FirstToken)
	defer firstToken.Stop()
	for {
		for m, ok := j.box.Pop(); ok; m, ok = j.box.Pop() {
			switch m := m.(type) {
			case error:
				if errors.Is(m, listener.ErrFlooded) {
					// More text unread than any reply holds: the worker
					// floods.
					res, _, err := j.brokeProtocol(clientCtx, "more text than any reply")
					return res, err
				}
				if errors.Is(m, listener.ErrOverflow) {
					// More of the current worker's messages waited than a
					// mailbox holds. If writing to the client stalled, the
					// client stopped reading: like a client that left, it
					// is charged and the worker stopped. If the client took
					// every write at once, the worker outran it with a
					// flood of small messages: the worker broke the
					// protocol, and the client is not charged for it.
					if j.slowestWrite < clientStall {
						res, _, err := j.brokeProtocol(clientCtx, "a flood of messages")
						return res, err
					}
					s.log.Warn("reply overflowed its mailbox", "job", j.job.ID, "worker", j.worker)
					j.cancelOnWorker()
					j.s.settleFailure(j.job.ID, "client_slow", false)
					return outcomeFailed, j.out.fail(errReplyOverflow)
				}
				return outcomeFailed, j.end(clientCtx, "listener_lost", oaiwire.ErrInternal)
			case *relaymsg.Lost:
				if m.Worker == j.worker {
					return j.retry(clientCtx)
				}
			case *relaymsg.Chunk, *relaymsg.Done, *relaymsg.Fail:
				if res, done, err := j.ordered(clientCtx, m); done {
					return res, err
				}
			}
			// An Assign here is stale (a dispatch raced our own claim).
		}
		select {
		case <-j.box.Ready():
		case <-firstToken.C:
			if j.firstAt.IsZero() {
				// A worker that says nothing (it registered a model it
				// does not serve, or hangs) is cut off, and the job moves
				// while nothing has reached the client.
				return j.cutSilent(clientCtx, "no first token in time")
			}
		case <-jobCtx.Done():
			return outcomeFailed, j.end(clientCtx, "timeout", oaiwire.ErrTimeout)
		}
	}
}

// errReplyOverflow ends a reply whose messages piled up unread.
var errReplyOverflow = &oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer, Code: "reply_overflow",
	Message: "The reply was not read as fast as it was generated: more of it was waiting than the gateway holds for one request, so it ended here. The request was charged."}

// errWorkerBroke ends a reply whose worker broke the relay protocol.
var errWorkerBroke = &oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer, Code: "worker_error",
	Message: "The worker sent an invalid reply and was disconnected. The request was not charged."}

// ordered applies worker messages in sequence order: API Gateway may
// deliver a connection's messages out of order. What waits for a gap to
// close is bounded; a worker past the bounds is cut off.
func (j *jobRun) ordered(clientCtx context.Context, m any) (outcome, bool, error) {
	from, seq, _ := relaymsg.Sender(m)
	if from != j.worker || seq < j.seq {
		return 0, false, nil // not from our worker, or a duplicate
	}
	if _, dup := j.pending[seq]; dup {
		return 0, false, nil
	}
	if c, ok := m.(*relaymsg.Chunk); ok && c.Image != nil {
		return j.brokeProtocol(clientCtx, "an image part in a chat reply")
	}
	size := messageBytes(m)
	if seq-j.seq > maxAhead || len(j.pending) >= maxPending || j.pendingBytes+size > maxPendingBytes {
		return j.brokeProtocol(clientCtx, "out-of-order messages past the bounds")
	}
	j.pending[seq] = m
	j.pendingBytes += size
	for {
		next, ok := j.pending[j.seq]
		if !ok {
			return 0, false, nil
		}
		delete(j.pending, j.seq)
		j.pendingBytes -= messageBytes(next)
		j.seq++
		if res, done, err := j.apply(clientCtx, next); done {
			return res, true, err
		}
	}
}

// brokeProtocol cuts off a worker that broke the protocol: the job moves
// if nothing reached the client, else it ends with an error and a refund.
func (j *jobRun) brokeProtocol(clientCtx context.Context, why string) (outcome, bool, error) {
	s := j.s
	lost := j.worker
	s.log.Warn("worker broke the protocol; cutting it off", "job", j.job.ID, "worker", lost, "why", why)
	j.cancelOnWorker()
	j.dropWorker(lost, true)
	if j.out.committed() {
		j.worker = ""
		return outcomeFailed, true, j.end(clientCtx, "worker_protocol", errWorkerBroke)
	}
	res, err := j.retry(clientCtx)
	return res, true, err
}

// dropWorker makes sure no dispatcher picks a worker again: its record
// goes (a live connection re-registers on its next connect), the
// dispatcher forgets it, and with cut its connection is closed too.
func (j *jobRun) dropWorker(conn string, cut bool) {
	s := j.s
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	s.dispatch.Forget(conn)
	if _, err := s.store.DeleteWorker(ctx, conn); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("drop worker", "worker", conn, "err", err)
	}
	if cut {
		if err := s.conns.Delete(ctx, conn); err != nil {
			s.log.Warn("close worker connection", "worker", conn, "err", err)
		}
	}
}

// messageBytes is the text a worker message carries, for the bounds.
func messageBytes(m any) int {
	c, ok := m.(*relaymsg.Chunk)
	if !ok {
		return 64
	}
	n := 0
	for _, d := range c.Deltas {
		n += deltaBytes(d)
	}
	return n
}

// deltaBytes is the text of one delta: a delta without any is not relayed,
// and is not in a receipt's output hash either.
func deltaBytes(d oaiwire.Delta) int { return relaymsg.TextBytes(d) }

func (j *jobRun) apply(clientCtx context.Context, m any) (outcome, bool, error) {
	switch m := m.(type) {
	case *relaymsg.Chunk:
		if j.firstAt.IsZero() {
			j.firstAt = j.s.now()
			j.rm.firstToken(j.firstAt)
		}
		for _, d := range m.Deltas {
			n := deltaBytes(d)
			if d.Empty() || n == 0 {
				continue // nothing to relay: it counts for nothing either
			}
			j.deltas++
			j.output.Add(d)
			j.stats.add(d)
			j.replyBytes += int64(n)
			if j.replyBytes > maxReplyBytes {
				return j.brokeProtocol(clientCtx, "reply larger than any request can ask for")
			}
			wrote := time.Now()
			if err := j.out.delta(d); err != nil {
				// The client is gone mid-stream.
				return outcomeFailed, true, j.end(clientCtx, "client_gone", nil)
			}
			j.slowestWrite = max(j.slowestWrite, time.Since(wrote))
		}
		// The chunk's deltas reach the client in one write.
		wrote := time.Now()
		if err := j.out.push(); err != nil {
			return outcomeFailed, true, j.end(clientCtx, "client_gone", nil)
		}
		j.slowestWrite = max(j.slowestWrite, time.Since(wrote))
		return 0, false, nil
	case *relaymsg.Done:
		if why := j.checkReceipt(m); why != "" {
			return j.rejectReceipt(clientCtx, why)
		}
		elapsed := j.s.now().Sub(j.postedAt)
		if why, strikes := j.checkWork(m, rawSpeed(j.deltas, elapsed, !j.firstAt.IsZero())); why != "" {
			return j.rejectWork(clientCtx, why, strikes)
		}
		usage, err := j.complete(m)
		if errors.Is(err, store.ErrNotActive) {
			return j.refuseWork(clientCtx)
		}
		if errors.Is(err, errRingRejected) {
			return j.rejectRing(clientCtx)
		}
		j.rm.completed(usage)
		return outcomeDone, true, j.out.finish(m.FinishReason, usage)
	case *relaymsg.Fail:
		j.s.log.Warn("worker failed job", "job", j.job.ID, "worker", j.worker, "code", m.Code)
		if !j.out.committed() {
			// Nothing reached the client: another worker may serve it. A
			// worker that registered a model it cannot run is cut off
			// first, so it is not handed the job (or the next) again.
			if m.Code == relaymsg.FailModelNotServed {
				j.dropWorker(j.worker, true)
			}
			if j.excluded == nil {
				j.excluded = map[string]bool{}
			}
			j.excluded[j.worker] = true
			if j.moveNow(clientCtx) {
				return outcomeRetry, true, nil
			}
			// No other worker is idle: the worker's answer is the reply
			// (a request this backend cannot serve gets its reason now,
			// not a 503 after the queue wait).
		}
		j.s.settleFailure(j.job.ID, "worker_error", true)
		return outcomeFailed, true, j.out.fail(&oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer,
			Code: "worker_error", Message: "The worker could not complete the request (" + m.Code + "). The request was not charged."})
	}
	return 0, false, nil
}

// moveNow hands a job its worker failed before any token to another idle
// worker at once, if there is one (the next runOnWorker uses it); false
// leaves the job to be failed.
func (j *jobRun) moveNow(clientCtx context.Context) bool {
	s := j.s
	ctx := context.WithoutCancel(clientCtx)
	if _, err := s.store.Requeue(ctx, j.job.ID, j.worker, s.now()); err != nil {
		s.log.Warn("requeue after a worker's failure", "job", j.job.ID, "err", err)
		return false
	}
	assigned, ok, err := s.dispatch.Assign(ctx, j.job, j.exclusions()...)
	if err != nil || !ok {
		return false
	}
	j.worker, j.next = "", assigned.Worker
	j.workerPubkey, j.workerAccount = assigned.WorkerPubkey, assigned.WorkerAccount
	j.out.reset()
	return true
}

// post sends the job's message msg to its worker; false, with what the
// attempt comes to, when it could not (the job moves to another worker).
func (j *jobRun) post(jobCtx, clientCtx context.Context, msg []byte) (bool, outcome, error) {
	s := j.s
	j.jobBytes = len(msg)
	// The mailbox takes the new worker's messages before the post goes
	// out: the worker may answer, even finish, before Post returns, and
	// a mailbox still expecting the worker the job moved away from would
	// drop that whole reply and leave the job waiting for its first
	// token in vain.
	j.box.Expect(j.worker)
	if err := s.conns.Post(jobCtx, j.worker, msg); err != nil {
		if errors.Is(err, connections.ErrGone) && j.goneRetries < maxGoneRetries {
			// The connection closed before its $disconnect reached the
			// store: the job never ran. Nobody may pick that worker
			// again, and the move costs the job none of its attempts.
			s.log.Info("worker gone before its job; moving job", "job", j.job.ID, "worker", j.worker)
			j.goneRetries++
			j.attempts--
			j.dropWorker(j.worker, false)
		} else {
			s.log.Warn("worker unreachable; moving job", "job", j.job.ID, "worker", j.worker, "err", err)
		}
		res, err := j.retry(clientCtx)
		return false, res, err
	}
	j.postedAt = s.now()
	return true, 0, nil
}

// cutSilent cuts off a worker that did not answer in time (why says what
// it failed to send) and moves the job.
func (j *jobRun) cutSilent(clientCtx context.Context, why string) (outcome, error) {
	j.s.log.Warn(why+"; cutting the worker off", "job", j.job.ID, "worker", j.worker)
	lost := j.worker
	j.cancelOnWorker()
	j.dropWorker(lost, true)
	return j.retry(clientCtx)
}

// retry moves the job to another worker if nothing reached the client yet;
// otherwise the job fails with a refund.
func (j *jobRun) retry(clientCtx context.Context) (outcome, error) {
	lost := j.worker
	j.worker = "" // it is gone: nothing to cancel
	if j.out.committed() {
		return outcomeFailed, j.end(clientCtx, "worker_lost", oaiwire.ErrWorkerLost)
	}
	if _, err := j.s.store.Requeue(context.WithoutCancel(clientCtx), j.job.ID, lost, j.s.now()); err != nil {
		j.s.log.Warn("requeue", "job", j.job.ID, "err", err)
		return outcomeFailed, j.end(clientCtx, "worker_lost", oaiwire.ErrWorkerLost)
	}
	j.out.reset()
	return outcomeRetry, nil
}

// cancelOnWorker tells the worker to stop; best effort, the store frees it.
func (j *jobRun) cancelOnWorker() {
	msg, err := relaymsg.Encode(&relaymsg.Cancel{Job: j.job.ID})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := j.s.conns.Post(ctx, j.worker, msg); err != nil {
		j.s.log.Debug("cancel on worker", "job", j.job.ID, "err", err)
	}
}

// completeTries bounds the attempts to record a completion.
const completeTries = 3

// complete settles a finished job: the worker's earning, its measured
// speed, and dispatch of the next job now that it is idle. It returns the
// usage to report, the worker's claim bounded by what the gateway relayed,
// and store.ErrNotActive when a verdict took the worker's identity out of
// good standing while the job ran (its work is refused, and the job still
// the caller's to settle), or errRingRejected when a ring job's stage
// receipts do not verify (nobody is paid; the caller ends the job); other
// store errors are logged.
func (j *jobRun) complete(m *relaymsg.Done) (oaiwire.Usage, error) {
	s := j.s
	now := s.now()
	usage := boundUsage(m.Usage, j.deltas, j.replyBytes, j.jobBytes)
	c := store.Completion{JobID: j.job.ID, Worker: j.worker, PromptTokens: usage.PromptTokens,
		CompletionTokens: usage.CompletionTokens, At: now, Receipt: storeReceipt(m.Receipt)}
	// A canary earns once its answer is judged (the verdict credits it),
	// not for finishing.
	if !j.job.Canary {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		account := j.workerAccount
		if j.model.Ring != nil {
			// A ring's stages are several accounts: its earning is the
			// base share (a stake boost is one account's).
			account = ""
		}
		c.Earning = s.earningFor(ctx, j.job.Price, account, now)
		cancel()
	}
	if j.model.Ring != nil {
		// A ring's earning goes to its stages, once their receipts
		// verify; nothing moves otherwise.
		shares, err := j.settleRing(m, c.Earning)
		if err != nil {
			return usage, err
		}
		c.Shares = shares
		// The driver's report of its drafts, now that the ring proved
		// its work; it moves no money (ringDetails).
		usage.CompletionTokensDetails = ringDetails(m.Usage.CompletionTokensDetails, usage, m.Ring)
	}
	// Decode speed: the deltas the gateway relayed after the first, over
	// the time since the first chunk arrived, as the gateway saw it —
	// never as the worker claims — and capped (see measuredSpeed).
	c.MilliTokPerSec = measuredSpeed(j.deltas, now.Sub(j.postedAt), !j.firstAt.IsZero())
	// Complete is idempotent: a failed attempt is tried again, since a
	// job left assigned keeps its worker busy and unpaid.
	var err error
	for try := range completeTries {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err = s.store.Complete(ctx, c)
		cancel()
		if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotActive) {
			break
		}
	}
	if errors.Is(err, store.ErrNotActive) {
		return usage, err
	}
	if err != nil {
		s.log.Error("complete job", "job", j.job.ID, "err", err)
		return usage, nil
	}
	s.dispatch.Released(j.worker, c.MilliTokPerSec)
	worker, model := j.worker, j.model.ID
	s.goSafe("dispatch after completion", func() { s.dispatchWorker(worker, model) })
	return usage, nil
}

// boundUsage bounds a worker's token claims by what the gateway saw: no
// more completion tokens than the deltas or bytes it relayed (a token is
// at least one byte, or a delta of its own), no more prompt tokens than
// the bytes of the job message, never negative. Nothing a worker claims
// moves money or dispatch weight beyond what it delivered. Completion
// token details are dropped: only a ring job's are reported, bounded by
// ringDetails once its stage receipts verify.
func boundUsage(claim oaiwire.Usage, deltas, replyBytes int64, jobBytes int) oaiwire.Usage {
	u := oaiwire.Usage{
		PromptTokens:     min(max(claim.PromptTokens, 0), int64(jobBytes)),
		CompletionTokens: min(max(claim.CompletionTokens, 0), max(deltas, replyBytes)),
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// minSpeedDeltas is the fewest deltas a reply needs for its speed to be
// measured: a reply of a few tokens says more about latency than speed.
const minSpeedDeltas = 8

// measuredSpeed is deltas after the first over elapsed (from when the job
// was posted to the worker: prefill and the network count, which a worker
// cannot shorten by sending its text in a burst), in thousandths of a token
// per second, capped at dispatch.MaxMilliTokPerSec; 0 when it cannot be
// measured. Integer arithmetic that cannot overflow: deltas carry a byte
// each at least, bounded by maxReplyBytes.
func measuredSpeed(deltas int64, elapsed time.Duration, started bool) int64 {
	return min(rawSpeed(deltas, elapsed, started), dispatch.MaxMilliTokPerSec)
}

// rawSpeed is measuredSpeed without the cap, for the speed check.
func rawSpeed(deltas int64, elapsed time.Duration, started bool) int64 {
	us := elapsed.Microseconds()
	if !started || deltas < minSpeedDeltas || us <= 0 {
		return 0
	}
	// (deltas-1) tokens per us × 10^9 = milli-tokens per second.
	return (deltas - 1) * 1_000_000_000 / us
}

// dispatchWorker runs dispatch for the models of a worker that turned idle.
func (s *Server) dispatchWorker(conn, model string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	models := []string{model}
	if w, err := s.store.GetWorker(ctx, conn); err == nil {
		models = w.Models
	}
	if _, err := s.dispatch.Dispatch(ctx, models); err != nil {
		s.log.Error("dispatch after completion", "worker", conn, "err", err)
	}
}

// settleFailure fails a job in the store, refunding it when the user did not
// cause the failure, and lets its worker take the next job. It must not
// depend on the client's context: the client may be gone.
func (s *Server) settleFailure(jobID, reason string, refund bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	at := s.now()
	job, err := s.store.Fail(ctx, jobID, reason, refund, at)
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			s.log.Error("fail job", "job", jobID, "reason", reason, "err", err)
		}
		return
	}
	s.log.Info("job failed", "job", jobID, "reason", reason, "refunded", job.Refunded)
	s.putRefund(job, reason, at)
	if job.Worker != "" {
		s.goSafe("dispatch after failure", func() { s.dispatchWorker(job.Worker, job.Model) })
	}
}

// headerBalance is the account's balance in credits right after this
// request's debit (other requests of the account may move it meanwhile),
// on successful chat responses.
const headerBalance = "x-balance-remaining"

// balanceWriter sets headerBalance on a 200 response from a read of the
// account made while the job is dispatched: off the request's critical
// path, it is almost always done when the first byte is written (a worker
// takes longer to answer than the store), and a read slower than
// balanceWait leaves the header out rather than hold the reply.
type balanceWriter struct {
	http.ResponseWriter
	read <-chan int64
	done bool
}

// balanceWait bounds how long the first byte of a reply waits for the
// balance read.
const balanceWait = 250 * time.Millisecond

func (s *Server) withBalance(w http.ResponseWriter, account string) http.ResponseWriter {
	read := make(chan int64, 1)
	go func() {
		defer func() { _ = recover() }()
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		defer cancel()
		if a, err := s.store.GetAccount(ctx, account); err == nil {
			read <- a.Credits
		}
		close(read)
	}()
	return &balanceWriter{ResponseWriter: w, read: read}
}

func (b *balanceWriter) WriteHeader(status int) {
	if !b.done {
		b.done = true
		if status == http.StatusOK {
			select {
			case credits, ok := <-b.read:
				if ok {
					b.Header().Set(headerBalance, strconv.FormatInt(credits, 10))
				}
			case <-time.After(balanceWait):
			}
		}
	}
	b.ResponseWriter.WriteHeader(status)
}

func (b *balanceWriter) Write(p []byte) (int, error) {
	if !b.done {
		b.WriteHeader(http.StatusOK)
	}
	return b.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer (Flush,
// deadlines).
func (b *balanceWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }
