package agent

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// session is one registered relay connection and the jobs it received. A
// job's reply goes back on the connection that brought it: the gateway
// checks the sender.
type session struct {
	a      *Agent
	ws     *websocket.Conn
	conn   string
	born   time.Time
	models map[string]string
	// batch is the chunk batching window the relay asked for.
	batch time.Duration
	// ringModels are the ring models this connection may be a member of
	// (Registered.Ring).
	ringModels map[string]bool

	writeMu sync.Mutex

	mu      sync.Mutex
	jobs    map[string]context.CancelFunc
	running sync.WaitGroup
	failure error

	dead     chan struct{}
	deadOnce sync.Once
}

func newSession(a *Agent, ws *websocket.Conn, conn string, models map[string]string) *session {
	return &session{a: a, ws: ws, conn: conn, born: time.Now(), models: models, ringModels: map[string]bool{},
		jobs: map[string]context.CancelFunc{}, dead: make(chan struct{})}
}

func (s *session) die(err error) {
	s.deadOnce.Do(func() {
		s.mu.Lock()
		s.failure = err
		s.mu.Unlock()
		close(s.dead)
	})
}

// closed reports whether the session has ended.
func (s *session) closed() bool {
	select {
	case <-s.dead:
		return true
	default:
		return false
	}
}

func (s *session) getModels() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models
}

func (s *session) setModels(m map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.models = m
}

func (s *session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failure
}

// send writes one message; writes are serialised per connection.
func (s *session) send(m any) error {
	b, err := relaymsg.Encode(m)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := s.ws.Write(ctx, websocket.MessageText, b); err != nil {
		s.die(err)
		return err
	}
	return nil
}

func (s *session) readLoop() {
	for {
		_, b, err := s.ws.Read(context.Background())
		if err != nil {
			s.die(err)
			return
		}
		m, err := relaymsg.Decode(b)
		if err != nil {
			s.a.cfg.Log.Warn("bad message from relay", "err", err)
			continue
		}
		s.handle(m)
	}
}

// handle acts on one message from the relay.
func (s *session) handle(m any) {
	switch m := m.(type) {
	case *relaymsg.Job:
		s.start(m)
	case *relaymsg.ImageJob:
		s.startImage(m)
	case *relaymsg.Cancel:
		s.mu.Lock()
		cancel := s.jobs[m.Job]
		s.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case *relaymsg.RingProbe, *relaymsg.RingAssign, *relaymsg.RingServe, *relaymsg.RingDisband:
		if s.a.cfg.Ring != nil {
			s.a.cfg.Ring.Handle(m)
		}
	case *relaymsg.Registered:
		s.a.cfg.Log.Info("registered", "conn", m.Conn, "models", m.Models, "ignored", m.Ignored)
	case *relaymsg.Error:
		s.a.cfg.Log.Warn("relay reported an error", "code", m.Code, "message", m.Message)
	}
}

func (s *session) heartbeat() {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-s.dead:
			return
		case <-t.C:
			if err := s.send(&relaymsg.Heartbeat{}); err != nil {
				return
			}
		}
	}
}

// drain asks the relay for no more jobs on this connection.
func (s *session) drain() {
	if err := s.send(&relaymsg.Drain{}); err != nil {
		s.a.cfg.Log.Debug("drain", "conn", s.conn, "err", err)
	}
}

func (s *session) waitJobs() { s.running.Wait() }

func (s *session) cancelJobs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.jobs {
		cancel()
	}
}

func (s *session) close(reason string) {
	s.die(errClosed)
	s.ws.Close(websocket.StatusNormalClosure, reason)
}

func (s *session) start(job *relaymsg.Job) {
	name, ok := s.getModels()[job.Model]
	if s.a.drives(job.Model) {
		name, ok = job.Model, true
	}
	if !ok {
		s.a.cfg.Observer.JobStarted(job.Model)
		s.a.cfg.Observer.JobEnded(job.Model, OutcomeRefused, oaiwire.Usage{})
		code := relaymsg.FailModelNotServed
		if s.ringModels[job.Model] {
			// A ring this worker no longer drives (disbanded a moment
			// ago): the job moves, and the worker is not to blame.
			code = relaymsg.FailRingNotServing
		}
		_ = s.send(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Code: code, Ticket: job.Ticket})
		return
	}
	// A job outlives a drain and a shutdown signal, but not the gateway's
	// cancel, nor its deadline: the reply ends (finish_reason "length")
	// just before the deadline, timed by this machine's clock from the
	// job's arrival, and the job is dropped once the gateway's grace for
	// the last message is over too.
	end := replyEnd(job, time.Now())
	s.goJob(job.Job, end, func(ctx context.Context) { s.run(ctx, end, job, name) })
}

// goJob runs a job in a goroutine of its own, until run returns or the
// job is cancelled (by the gateway, or hardStopAfter past end): a drain
// and a shutdown wait for it.
func (s *session) goJob(id string, end time.Time, run func(ctx context.Context)) {
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(hardStopAfter))
	s.mu.Lock()
	s.jobs[id] = cancel
	s.mu.Unlock()
	s.running.Add(1)
	s.a.jobs.Add(1)
	go func() {
		defer s.a.jobs.Done()
		defer s.running.Done()
		defer func() {
			s.mu.Lock()
			delete(s.jobs, id)
			s.mu.Unlock()
			cancel()
		}()
		run(ctx)
	}()
}

// errReplyDeadline ends a generation that reached the job's deadline.
var errReplyDeadline = errors.New("agent: the job's deadline came")

// hardStopAfter is how long after the reply's end a job is dropped if it
// has not finished (a backend that ignores cancellation); the gateway stops
// waiting 5 s after the deadline.
const hardStopAfter = 5 * time.Second

// replyEnd is when a job's reply must end: its budget from now, less a
// margin for the last message to reach the gateway (a tenth of the
// budget, at most a second). A gateway that sends no budget gives the
// absolute deadline only.
func replyEnd(job *relaymsg.Job, now time.Time) time.Time {
	if job.BudgetMillis <= 0 {
		return job.Deadline.Add(-time.Second)
	}
	budget := time.Duration(job.BudgetMillis) * time.Millisecond
	return now.Add(budget - min(budget/10, time.Second))
}

// run executes one job and streams its reply. Only metadata is logged.
func (s *session) run(ctx context.Context, end time.Time, job *relaymsg.Job, model string) {
	log := s.a.cfg.Log.With("job", job.Job, "model", job.Model)
	started := time.Now()
	obs := s.a.cfg.Observer
	obs.JobStarted(job.Model)
	outcome, usage := OutcomeInternal, oaiwire.Usage{}
	defer func() { obs.JobEnded(job.Model, outcome, usage) }()
	defer func() {
		// A backend that panics fails its job, not the daemon and every
		// other job on it.
		if p := recover(); p != nil {
			outcome, usage = OutcomeInternal, oaiwire.Usage{}
			log.Error("job panicked", "panic", p)
			_ = s.send(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Code: "internal", Ticket: job.Ticket})
		}
	}()
	// The receipt hashes the request as it arrived, before the backend
	// sees it.
	receipt, err := s.receiptOf(job, model)
	if err != nil {
		log.Error("job receipt", "err", err)
		_ = s.send(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Code: "internal", Ticket: job.Ticket})
		return
	}
	b := &batcher{s: s, job: job.Job, to: job.ReplyTo, ticket: job.Ticket, receipt: receipt, started: started}
	genCtx, stopGen := context.WithDeadlineCause(ctx, end, errReplyDeadline)
	defer stopGen()
	var res backend.Result
	var ring *relaymsg.RingDone
	if s.a.drives(job.Model) {
		res, ring, err = s.a.cfg.Ring.Chat(genCtx, job, b.add)
	} else {
		res, err = s.a.cfg.Backend.Chat(genCtx, model, &job.Request, b.add)
	}
	if ferr := b.flush(); err == nil {
		err = ferr
	}
	switch {
	case err != nil && ctx.Err() == nil && errors.Is(context.Cause(genCtx), errReplyDeadline):
		// The deadline came first: the reply is complete as far as it
		// goes, like one cut by max_tokens, and is delivered as such.
		log.Info("job done at its deadline", "completion_tokens", b.deltas(), "ms", time.Since(started).Milliseconds())
		outcome, usage = OutcomeDeadline, oaiwire.Usage{CompletionTokens: b.deltas()}
		// A ring closes itself on the way out, so that its stages'
		// receipts settle the job as far as it went.
		b.end(&relaymsg.Done{Job: job.Job, To: job.ReplyTo, FinishReason: oaiwire.FinishLength,
			Usage: usage, Ticket: job.Ticket, Ring: ring})
	case ctx.Err() != nil:
		// Cancelled by the gateway or past the deadline: the gateway has
		// settled the job already; an answer would go nowhere.
		log.Info("job stopped", "reason", context.Cause(ctx), "ms", time.Since(started).Milliseconds())
		outcome = OutcomeCancelled
	case err != nil:
		// Only our own error text: the server's may quote the prompt.
		safe := truncate(backend.SafeText(err), 512)
		log.Warn("job failed", "err", safe)
		outcome = OutcomeFailed
		obs.BackendError(job.Model)
		b.end(&relaymsg.Fail{Job: job.Job, To: job.ReplyTo, Code: "backend_error", Message: safe, Ticket: job.Ticket})
	default:
		log.Info("job done", "finish", res.FinishReason, "prompt_tokens", res.Usage.PromptTokens,
			"completion_tokens", res.Usage.CompletionTokens, "ms", time.Since(started).Milliseconds())
		outcome, usage = OutcomeCompleted, res.Usage
		b.end(&relaymsg.Done{Job: job.Job, To: job.ReplyTo, FinishReason: res.FinishReason, Usage: res.Usage, Ticket: job.Ticket, Ring: ring})
	}
	if b.unsigned {
		outcome, usage = OutcomeInternal, oaiwire.Usage{}
	}
}

// receiptOf starts a job's receipt with what is known before the reply:
// the job, the model and its digest, the request's hash. The batcher
// completes and signs it when the job is done.
func (s *session) receiptOf(job *relaymsg.Job, backendModel string) (*relaymsg.Receipt, error) {
	reqHash, err := relaymsg.RequestHash(&job.Request)
	if err != nil {
		return nil, err
	}
	r := &relaymsg.Receipt{Job: job.Job, Model: job.Model, RequestSHA256: reqHash}
	if d, ok := s.a.cfg.Backend.(backend.Digester); ok {
		// A digest past the receipt's bound would get the done refused:
		// better none.
		if digest := d.ModelDigest(backendModel); len(digest) <= maxModelDigest {
			r.ModelDigest = digest
		}
	}
	return r, nil
}

// maxModelDigest is the longest model digest a receipt holds (its
// validator's bound).
const maxModelDigest = 128

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// batcher groups a job's deltas into chunks: the first at once, then one
// per batch window (the relay's) or batchBytes.
type batcher struct {
	s               *session
	job, to, ticket string

	mu      sync.Mutex
	seq     int64
	pending []oaiwire.Delta
	size    int
	// sent counts the deltas handed to the batcher.
	sent    int64
	timer   *time.Timer
	sentAny bool
	// lastSent is when the last chunk left.
	lastSent time.Time
	err      error
	// scratch is encodedSize's buffer.
	scratch []byte

	// receipt is the job's receipt so far (receiptOf); end completes it
	// from output and the timings, signs it and sends it in the done.
	receipt *relaymsg.Receipt
	// output hashes every delta handed to the batcher, in order: what the
	// gateway relays, and hashes too.
	output relaymsg.OutputHasher
	// started is when the job arrived, firstAt when its first delta with
	// text was handed over.
	started, firstAt time.Time
	// unsigned is set by end when the receipt could not be signed and a
	// fail went instead of the done.
	unsigned bool
}

// errJobEnded refuses deltas after a job's last message.
var errJobEnded = errors.New("agent: the job has ended")

func (b *batcher) add(d oaiwire.Delta) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	n := encodedSize(d, &b.scratch)
	if len(b.pending) > 0 && b.size+n > batchBytes {
		// Flush first, so a chunk holds at most batchBytes of deltas
		// (or one larger delta alone) and stays under the message cap.
		if b.flushLocked(); b.err != nil {
			return b.err
		}
	}
	b.pending = append(b.pending, d)
	b.size += n
	b.sent++
	b.output.Add(d)
	if b.firstAt.IsZero() && relaymsg.TextBytes(d) > 0 {
		b.firstAt = time.Now()
		if b.receipt != nil {
			b.s.a.cfg.Observer.FirstToken(b.receipt.Model, b.firstAt.Sub(b.started))
		}
	}
	// A delta goes at once when the last chunk left at least one window
	// ago, so tokens slower than the window (most real models: 10–50 ms
	// apart) pay no batching delay; faster bursts are gathered, at most
	// one chunk per window.
	since := time.Since(b.lastSent)
	switch {
	case !b.sentAny, b.size >= batchBytes, since >= b.s.batch:
		b.flushLocked()
	case b.timer == nil:
		b.timer = time.AfterFunc(b.s.batch-since, func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.flushLocked()
		})
	}
	return b.err
}

// encodedSize is the bytes d takes in a chunk: its JSON, which may be up to
// six times its text (JSON escapes <, >, & and control characters as
// \u00XX), and a separating comma. A delta without tool calls (every token
// of a plain reply) is measured in scratch, reused, instead of marshalled.
func encodedSize(d oaiwire.Delta, scratch *[]byte) int {
	if b, ok := oaiwire.AppendDelta((*scratch)[:0], d); ok {
		*scratch = oaiwire.KeepBuffer(b)
		return len(b) + 1
	}
	j, err := json.Marshal(d)
	if err != nil {
		return batchBytes // flushed alone; Encode reports the error
	}
	return len(j) + 1
}

// deltas is how many deltas the reply had.
func (b *batcher) deltas() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sent
}

func (b *batcher) flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	return b.err
}

func (b *batcher) flushLocked() {
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(b.pending) == 0 || b.err != nil {
		return
	}
	err := b.s.send(&relaymsg.Chunk{Job: b.job, To: b.to, Seq: b.seq, Deltas: b.pending, Ticket: b.ticket})
	b.pending, b.size, b.sentAny, b.lastSent = nil, 0, true, time.Now()
	if err != nil {
		// The chunk was not sent: the job's fail takes its seq, so the
		// receiver sees no gap.
		b.err = err
		return
	}
	b.seq++
}

// end sends the job's last message after its chunks: a done carries the
// job's signed receipt. Nothing is sent for the job after it.
func (b *batcher) end(m any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	switch d := m.(type) {
	case *relaymsg.Done:
		d.Seq = b.seq
		if err := b.sign(d); err != nil {
			// A done without a receipt earns nothing; say what happened.
			b.s.a.cfg.Log.Error("sign the job's receipt", "job", b.job, "err", err)
			m = &relaymsg.Fail{Job: d.Job, To: d.To, Seq: b.seq, Code: "internal", Message: "could not sign the receipt", Ticket: d.Ticket}
			b.unsigned = true
		}
	case *relaymsg.Fail:
		d.Seq = b.seq
	}
	b.seq++
	if b.err == nil {
		b.err = errJobEnded
	}
	_ = b.s.send(m) // a dead connection is reported by the relay as a lost worker
}

// sign completes the job's receipt from what was sent and d's usage, signs
// it with the worker's identity key and puts it in d. Numbers are clamped
// into the receipt's bounds: an out-of-bounds one would get the done
// refused.
func (b *batcher) sign(d *relaymsg.Done) error {
	if b.receipt == nil {
		return errors.New("no receipt started")
	}
	r := *b.receipt
	r.OutputSHA256, r.Deltas = b.output.Sum(), clampCount(b.output.Deltas())
	r.PromptTokens, r.CompletionTokens = clampCount(d.Usage.PromptTokens), clampCount(d.Usage.CompletionTokens)
	if !b.firstAt.IsZero() {
		r.FirstTokenMillis = clampMillis(b.firstAt.Sub(b.started))
	}
	r.TotalMillis = clampMillis(time.Since(b.started))
	if err := relaymsg.SignReceipt(b.s.a.cfg.Key, &r); err != nil {
		return err
	}
	d.Receipt = &r
	return nil
}

func clampCount(n int64) int64 { return min(max(n, 0), relaymsg.MaxReceiptCount) }

func clampMillis(d time.Duration) int64 {
	return min(max(d.Milliseconds(), 0), relaymsg.MaxReceiptMillis)
}
