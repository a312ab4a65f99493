package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// chat serves POST /v1/chat/completions: admit (rate limit and debit in one
// store write), dispatch, relay the prompt to the worker in memory, stream
// the reply back, settle.
func (s *Server) chat(w http.ResponseWriter, r *http.Request) error {
	req, err := oaiwire.DecodeChatRequest(r.Body)
	if err != nil {
		return err
	}
	model, ok := s.catalog.Resolve(req.Model)
	if !ok {
		return oaiwire.ModelNotFound(req.Model)
	}
	conn, err := s.relay.Conn()
	if err != nil {
		s.log.Error("relay listener down", "err", err)
		return oaiwire.ErrNoWorker
	}
	// The mailbox opens before the job exists: from the moment Admit
	// queues it, any dispatcher may assign it and send the assignment here.
	id := newCompletionID()
	box, err := s.relay.Subscribe(id, conn)
	if err != nil {
		s.log.Error("relay listener down", "err", err)
		return oaiwire.ErrNoWorker
	}
	defer box.Close()
	p := who(r)
	now := s.now()
	window := now.Truncate(time.Minute)
	// Not the client's context: a client that hangs up while Admit is in
	// flight must not leave the debit's outcome unknown.
	admitCtx, cancelAdmit := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
	job, err := s.store.Admit(admitCtx, store.AdmitRequest{
		KeyHash: p.keyHash,
		Window:  window,
		Limit:   s.limits.RatePerMinute,
		Job: store.Job{ID: id, AccountID: p.account, Model: model.ID, Price: model.Price,
			State: store.JobQueued, Listener: conn, Created: now, Updated: now},
	})
	cancelAdmit()
	switch {
	case errors.Is(err, store.ErrRateLimited):
		retry := int(window.Add(time.Minute).Sub(now).Seconds()) + 1
		return oaiwire.RateLimited(s.limits.RatePerMinute, retry)
	case errors.Is(err, store.ErrInsufficientCredits):
		return oaiwire.ErrInsufficientQuota
	case errors.Is(err, store.ErrRevoked), errors.Is(err, store.ErrNotFound):
		s.keys.evict(p.keyHash)
		return oaiwire.ErrInvalidKey
	case err != nil:
		// A store error may hide a write that committed (a reply lost
		// after the SDK gave up): fail the job with a refund in case it
		// exists, so no one is charged for a job nobody waits for.
		s.settleFailure(id, "admit_error", true)
		return fmt.Errorf("admit: %w", err)
	}
	var out sink
	if req.Stream {
		out = newStreamSink(w, job.ID, model.ID, now, req.IncludeUsage())
	} else {
		out = newBufferSink(w, job.ID, model.ID, now)
	}
	run := &jobRun{s: s, req: req, job: job, model: model, box: box, out: out}
	return run.serve(r.Context())
}

// storeTimeout bounds one store call made for a request whatever the
// client does meanwhile.
const storeTimeout = 10 * time.Second

// queueRecheck is how often a queued job tries to claim a worker itself.
const queueRecheck = 500 * time.Millisecond

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

	worker   string // connection of the assigned worker
	seq      int64  // next expected message sequence from the worker
	pending  map[int64]any
	firstAt  time.Time // first chunk from the worker
	attempts int
}

// outcome of waiting for a worker's reply.
type outcome int

const (
	outcomeDone outcome = iota
	outcomeRetry
	outcomeFailed
)

func (j *jobRun) serve(ctx context.Context) error {
	l := j.s.limits
	jobCtx, cancel := context.WithDeadline(ctx, j.job.Created.Add(l.Job))
	defer cancel()
	for {
		j.attempts++
		if assigned, err := j.waitForWorker(jobCtx, ctx); !assigned {
			return err
		}
		res, err := j.runOnWorker(jobCtx, ctx)
		if res != outcomeRetry {
			return err
		}
		if j.attempts >= l.MaxAttempts {
			j.s.settleFailure(j.job.ID, "worker_lost", true)
			return j.out.fail(oaiwire.ErrWorkerLost)
		}
	}
}

// waitForWorker gets the job a worker: at once if one is idle, else when a
// dispatch elsewhere assigns it, until the queue wait runs out. When it
// returns false the job is settled and err is what the handler returns (nil
// once the answer is written).
func (j *jobRun) waitForWorker(jobCtx, clientCtx context.Context) (bool, error) {
	s := j.s
	assigned, ok, err := s.dispatch.Assign(jobCtx, j.job)
	if err != nil {
		return false, j.end(clientCtx, "store_error", fmt.Errorf("dispatch: %w", err))
	}
	if ok {
		j.worker = assigned.Worker
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
				j.worker = m.Worker
				return true, nil
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
				j.worker = job.Worker
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
	job, claimed, err := j.s.dispatch.Assign(ctx, j.job)
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
	msg, err := relaymsg.Encode(&relaymsg.Job{Job: j.job.ID, ReplyTo: j.job.Listener, Model: j.model.ID,
		Request: *j.req, Deadline: j.job.Created.Add(s.limits.Job)})
	if err != nil {
		// The prompt cannot fit in one relay message: the user's input,
		// but refused before any work, so refunded.
		return outcomeFailed, j.end(clientCtx, "too_large", oaiwire.InvalidRequest("messages",
			"the request is too large to relay to a worker (limit 128 KiB once encoded)"))
	}
	if err := s.conns.Post(jobCtx, j.worker, msg); err != nil {
		s.log.Warn("worker unreachable; moving job", "job", j.job.ID, "worker", j.worker, "err", err)
		return j.retry(clientCtx)
	}
	j.seq, j.pending, j.firstAt = 0, map[int64]any{}, time.Time{}
	firstToken := time.NewTimer(s.limits.FirstToken)
	defer firstToken.Stop()
	for {
		for m, ok := j.box.Pop(); ok; m, ok = j.box.Pop() {
			switch m := m.(type) {
			case error:
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
				return outcomeFailed, j.end(clientCtx, "first_token_timeout", oaiwire.ErrTimeout)
			}
		case <-jobCtx.Done():
			return outcomeFailed, j.end(clientCtx, "timeout", oaiwire.ErrTimeout)
		}
	}
}

// ordered applies worker messages in sequence order: API Gateway may
// deliver a connection's messages out of order.
func (j *jobRun) ordered(clientCtx context.Context, m any) (outcome, bool, error) {
	from, seq := sender(m)
	if from != j.worker || seq < j.seq {
		return 0, false, nil // not from our worker, or a duplicate
	}
	j.pending[seq] = m
	for {
		next, ok := j.pending[j.seq]
		if !ok {
			return 0, false, nil
		}
		delete(j.pending, j.seq)
		j.seq++
		if res, done, err := j.apply(clientCtx, next); done {
			return res, true, err
		}
	}
}

func sender(m any) (string, int64) {
	switch m := m.(type) {
	case *relaymsg.Chunk:
		return m.From, m.Seq
	case *relaymsg.Done:
		return m.From, m.Seq
	case *relaymsg.Fail:
		return m.From, m.Seq
	}
	return "", -1
}

func (j *jobRun) apply(clientCtx context.Context, m any) (outcome, bool, error) {
	switch m := m.(type) {
	case *relaymsg.Chunk:
		if j.firstAt.IsZero() {
			j.firstAt = j.s.now()
		}
		for _, d := range m.Deltas {
			if err := j.out.delta(d); err != nil {
				// The client is gone mid-stream.
				return outcomeFailed, true, j.end(clientCtx, "client_gone", nil)
			}
		}
		return 0, false, nil
	case *relaymsg.Done:
		j.complete(m)
		return outcomeDone, true, j.out.finish(m.FinishReason, m.Usage)
	case *relaymsg.Fail:
		j.s.log.Warn("worker failed job", "job", j.job.ID, "worker", j.worker, "code", m.Code)
		j.s.settleFailure(j.job.ID, "worker_error", true)
		return outcomeFailed, true, j.out.fail(&oaiwire.Error{Status: http.StatusBadGateway, Type: oaiwire.TypeServer,
			Code: "worker_error", Message: "The worker could not complete the request (" + m.Code + "). The request was not charged."})
	}
	return 0, false, nil
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
// speed, and dispatch of the next job now that it is idle.
func (j *jobRun) complete(m *relaymsg.Done) {
	s := j.s
	now := s.now()
	c := store.Completion{JobID: j.job.ID, Worker: j.worker, PromptTokens: m.Usage.PromptTokens,
		CompletionTokens: m.Usage.CompletionTokens, Earning: j.job.Price * s.limits.WorkerSharePercent / 100, At: now}
	// Decode speed: tokens after the first over the time since the first
	// chunk arrived, as the gateway saw it, never as the worker claims.
	if el := now.Sub(j.firstAt); m.Usage.CompletionTokens > 1 && !j.firstAt.IsZero() && el > 0 {
		c.MilliTokPerSec = (m.Usage.CompletionTokens - 1) * int64(time.Second/time.Microsecond) * 1000 / max(el.Microseconds(), 1)
	}
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
		if err == nil || errors.Is(err, store.ErrConflict) {
			break
		}
	}
	if err != nil {
		s.log.Error("complete job", "job", j.job.ID, "err", err)
		return
	}
	s.dispatch.Released(j.worker, c.MilliTokPerSec)
	go s.dispatchWorker(j.worker, j.model.ID)
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
	job, err := s.store.Fail(ctx, jobID, reason, refund, s.now())
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			s.log.Error("fail job", "job", jobID, "reason", reason, "err", err)
		}
		return
	}
	s.log.Info("job failed", "job", jobID, "reason", reason, "refunded", job.Refunded)
	if job.Worker != "" {
		go s.dispatchWorker(job.Worker, job.Model)
	}
}
