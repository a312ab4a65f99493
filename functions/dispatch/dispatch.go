// Package dispatch matches queued jobs with idle workers. It runs when a job
// is enqueued (the API), when a worker registers and when a worker turns idle
// (the relay and the API), so a job never waits while an eligible worker is
// idle. All state is in the store; a Dispatcher holds none and any number of
// them may race: conditional writes decide who wins.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/store"
)

// MinMilliTokPerSec is the weight floor: 5 tok/s, so a new or slow worker
// still gets jobs and can be measured.
const MinMilliTokPerSec = 5_000

// MaxMilliTokPerSec is the weight ceiling: 1,000 tok/s, above any single
// stream a contributor GPU decodes (a 4090 serves an 8B model at ~150
// tok/s). A speed is the gateway's own measurement, but a worker chooses
// when its messages arrive; the cap bounds what a fast-replying worker can
// draw to 200 times the floor, and keeps every sum of weights far from
// overflow (2^63 / 10^6 is 9 × 10^12 workers).
const MaxMilliTokPerSec = 1_000_000

// maxClaimTries bounds the claims one Assign makes when other dispatchers
// keep winning the workers it picks.
const maxClaimTries = 64

// batch is how many queued jobs one pass looks at per model.
const batch = 16

// Store is what dispatch needs from the store.
type Store interface {
	Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error)
	QueuedJobs(ctx context.Context, model string, limit int) ([]store.Job, error)
	IdleWorkers(ctx context.Context, model string) ([]store.Worker, error)
	Assign(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error)
	Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (store.Job, error)
	GetJob(ctx context.Context, id string) (store.Job, error)
}

// Poster delivers messages to relay connections.
type Poster interface {
	Post(ctx context.Context, conn string, data []byte) error
}

// Dispatcher assigns jobs to workers.
type Dispatcher struct {
	store Store
	post  Poster
	now   func() time.Time
	log   *slog.Logger
	// pick returns a number in [0, n); weighted choice draws from it.
	pick   func(n int64) int64
	idle   idleCache
	claims claims
}

// claims are the jobs whose Assign is running in this dispatcher. Dispatch
// leaves such a job to its claimer instead of racing it for a worker (in
// the API, a request claims its own job right after admitting it, while
// every completion dispatches the queue): the race cost both a store write
// that lost and a re-read of the job. So that the job never waits while a
// worker is idle, a Dispatch that skips it tells the claimer to look again
// before giving up (the worker that turned idle was listed before that
// Dispatch ran).
type claims struct {
	mu sync.Mutex
	// jobs maps a job being claimed to whether a Dispatch skipped it
	// meanwhile.
	jobs map[string]*claim
}

type claim struct {
	n     int  // Assigns of the job running here (normally one)
	again bool // a Dispatch skipped the job while they ran
}

// begin records a claim of job.
func (c *claims) begin(job string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs = map[string]*claim{}
	}
	cl := c.jobs[job]
	if cl == nil {
		cl = &claim{}
		c.jobs[job] = cl
	}
	cl.n++
}

// finish ends a claim of job that found no worker, unless a Dispatch
// skipped the job meanwhile: then it reports true, and the claim looks
// again.
func (c *claims) finish(job string, found bool) (again bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.jobs[job]
	if !found && cl.again {
		cl.again = false
		return true
	}
	if cl.n--; cl.n == 0 {
		delete(c.jobs, job)
	}
	return false
}

// skip reports whether job is being claimed here, and if so asks the
// claim to look again before it gives up.
func (c *claims) skip(job string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.jobs[job]
	if cl == nil {
		return false
	}
	cl.again = true
	return true
}

// New makes a Dispatcher.
func New(s Store, p Poster, log *slog.Logger) *Dispatcher {
	return &Dispatcher{store: s, post: p, now: time.Now, log: log, pick: rand.Int64N}
}

// Assign gives the job to an idle worker chosen at random, weighted by
// measured speed. ok is false when no eligible worker is idle: the job stays
// queued for the next dispatch. err is only for store failures.
//
// The idle list comes from this dispatcher's cache when it is fresh (see
// idleTTL), else from the store. Under a burst many dispatchers draw from
// the same idle list; a lost claim means another job got that worker, so the
// loser tries the rest and then a list read from the store, and gives up
// only when no idle worker is left (or after maxClaimTries, when the queue's
// own dispatch takes over).
//
// Only eligible workers are chosen (see eligible): not those in exclude
// (ones that failed this job), none that cannot serve the job's needs, no
// quarantined one for a real job, and only the target for a targeted one.
//
// While it runs, a Dispatch in this dispatcher leaves the job to it (see
// claims).
func (d *Dispatcher) Assign(ctx context.Context, job store.Job, exclude ...string) (assigned store.Job, ok bool, err error) {
	d.claims.begin(job.ID)
	for {
		assigned, ok, err = d.assign(ctx, job, exclude)
		if !d.claims.finish(job.ID, ok || err != nil) {
			return assigned, ok, err
		}
	}
}

// AdmitAssigner is a store that can admit a job and assign it to a worker
// in one write (both stores: store/embedded.Store.AdmitAssign,
// store/dynamo.Store.AdmitAssign). Its errors are Admit's; assigned is
// false, with the job admitted queued, when that worker could not take it
// (or the store did not try).
type AdmitAssigner interface {
	AdmitAssign(ctx context.Context, r store.AdmitRequest, worker string) (adm store.Admission, assigned bool, err error)
}

// idleReadTimeout bounds the idle-list read Admit makes when its list is
// stale: the read only saves a round trip, and must not eat the time the
// admission's own write has.
const idleReadTimeout = time.Second

// Admit admits r.Job (Store.Admit) and, when the store is an AdmitAssigner
// and this dispatcher's idle list (cached, or read now if stale: see
// idleTTL) has an eligible worker, assigns it to that worker, chosen as
// Assign chooses, in the same write: the job returned is then JobAssigned,
// and the request's path pays one store write instead of two. Otherwise,
// or when that worker was just taken elsewhere, the job is admitted
// queued, as by Store.Admit, and Assign claims it next (a worker that was
// taken costs that Assign a lost claim, which drops it from the list).
// Errors are the admission's.
func (d *Dispatcher) Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error) {
	aa, ok := d.store.(AdmitAssigner)
	if !ok {
		return d.store.Admit(ctx, r)
	}
	cached, gen := d.idle.take(r.Job.Model, d.now())
	if cached == nil {
		// No fresh list: read one, as the Assign that would follow does.
		// A failed or slow read leaves the job to that Assign.
		readCtx, cancel := context.WithTimeout(ctx, idleReadTimeout)
		ws, err := d.store.IdleWorkers(readCtx, r.Job.Model)
		cancel()
		if err == nil {
			d.idle.set(r.Job.Model, ws, d.now())
			cached, gen = d.idle.take(r.Job.Model, d.now())
		}
	}
	workers := eligible(cached, r.Job, nil)
	if len(workers) == 0 {
		return d.store.Admit(ctx, r)
	}
	w := workers[d.choose(workers)]
	adm, assigned, err := aa.AdmitAssign(ctx, r, w.Conn)
	if err == nil && assigned {
		d.idle.drop(w, true, gen)
	}
	return adm, err
}

// assign is one try of Assign.
func (d *Dispatcher) assign(ctx context.Context, job store.Job, exclude []string) (assigned store.Job, ok bool, err error) {
	cached, gen := d.idle.take(job.Model, d.now())
	workers := eligible(cached, job, exclude)
	fresh := false
	for try := 0; try < maxClaimTries; try++ {
		if len(workers) == 0 {
			if fresh {
				return store.Job{}, false, nil
			}
			if workers, err = d.store.IdleWorkers(ctx, job.Model); err != nil {
				return store.Job{}, false, fmt.Errorf("dispatch: idle workers for %s: %w", job.Model, err)
			}
			fresh = true
			d.idle.set(job.Model, workers, d.now())
			_, gen = d.idle.take(job.Model, d.now())
			workers = eligible(workers, job, exclude)
			if len(workers) == 0 {
				return store.Job{}, false, nil
			}
		}
		i := d.choose(workers)
		w := workers[i]
		assigned, err = d.store.Assign(ctx, job.ID, w.Conn, d.now())
		switch {
		case err == nil:
			d.idle.drop(w, true, gen)
			return assigned, true, nil
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// Someone else won this worker, or the job: look at which.
			// A job taken elsewhere (a queue index read a moment stale
			// offers jobs already assigned) says nothing about the
			// worker, which stays listed; only a lost worker is dropped.
			if j, gerr := d.jobState(ctx, job.ID); gerr == nil && j != store.JobQueued {
				return store.Job{}, false, nil
			}
			d.idle.drop(w, false, gen)
			workers = append(workers[:i], workers[i+1:]...)
		default:
			return store.Job{}, false, fmt.Errorf("dispatch: assign %s: %w", job.ID, err)
		}
	}
	return store.Job{}, false, nil
}

// Released tells the dispatcher that a worker it assigned a job to is idle
// again (the job completed, with the speed measured, or 0), so the next
// request can pick it without reading the store.
func (d *Dispatcher) Released(conn string, milliTokPerSec int64) {
	d.idle.release(conn, milliTokPerSec)
}

// Registered puts a worker that just registered into this dispatcher's
// cached idle lists of its models, so the next Assign can pick it without a
// store read. Other processes see it when their lists expire (idleTTL). A
// worker that registers again (a hostile one may, in a loop) changes
// nothing: it is listed once, and no list is dropped.
func (d *Dispatcher) Registered(w store.Worker) {
	if w.Registered && w.State == store.WorkerIdle && !w.Draining {
		d.idle.add(w)
	}
}

// Judged updates this dispatcher's cached view of a worker after a
// verdict: its standing and strikes, which decide what it may take and
// its weight.
func (d *Dispatcher) Judged(conn string, standing store.Standing, strikes int64) {
	d.idle.judged(conn, standing, strikes)
}

// Forget drops a worker from every cache of this dispatcher: its
// connection is gone or was cut off, and no job may be handed to it again.
func (d *Dispatcher) Forget(conn string) {
	d.idle.forget(conn)
}

// jobState re-reads a job when a claim fails: it tells "the job is taken"
// (stop) from "the worker is taken" (try another). The queue is only a hint.
func (d *Dispatcher) jobState(ctx context.Context, id string) (store.JobState, error) {
	j, err := d.store.GetJob(ctx, id)
	if err != nil {
		return "", err
	}
	return j.State, nil
}

// eligible returns the workers of ws that may take job: not in exclude,
// able to serve its needs, the target if it has one, and in good standing
// unless it is a canary (a quarantined worker gets canaries only).
func eligible(ws []store.Worker, job store.Job, exclude []string) []store.Worker {
	return slices.DeleteFunc(ws, func(w store.Worker) bool {
		return slices.Contains(exclude, w.Conn) || !w.CanServe(job.Model, job.Needs) ||
			(job.Target != "" && w.Conn != job.Target) || (!job.Canary && w.Quarantined())
	})
}

// choose draws an index with probability proportional to speed, divided
// by one plus the worker's strikes (a worker under suspicion gets less of
// the traffic until canaries clear it). A worker not measured yet weighs
// the median of the measured ones (the floor when none is), so that a new
// worker is tried, and measured, at the rate a typical worker of the
// model is — not starved at the floor next to workers that were measured
// fast.
func (d *Dispatcher) choose(ws []store.Worker) int {
	unmeasured := medianSpeed(ws)
	weightOf := func(w store.Worker) int64 {
		v := unmeasured
		if w.MilliTokPerSec > 0 {
			v = weight(w.MilliTokPerSec)
		}
		return max(v/(1+min(max(w.Strikes, 0), store.BanStrikes)), 1)
	}
	var total int64
	for _, w := range ws {
		total += weightOf(w)
	}
	r := d.pick(total)
	for i, w := range ws {
		if r < weightOf(w) {
			return i
		}
		r -= weightOf(w)
	}
	return len(ws) - 1
}

// medianSpeed is the (lower) median weight of the measured workers, or the
// floor when none is measured.
func medianSpeed(ws []store.Worker) int64 {
	var speeds []int64
	for _, w := range ws {
		if w.MilliTokPerSec > 0 {
			speeds = append(speeds, weight(w.MilliTokPerSec))
		}
	}
	if len(speeds) == 0 {
		return MinMilliTokPerSec
	}
	slices.Sort(speeds)
	return speeds[(len(speeds)-1)/2]
}

// weight is a measured speed as a draw, within [MinMilliTokPerSec,
// MaxMilliTokPerSec] whatever the record says.
func weight(milliTokPerSec int64) int64 {
	return min(max(milliTokPerSec, MinMilliTokPerSec), MaxMilliTokPerSec)
}

// Dispatch drains the queues of the models: while a model has queued jobs
// and idle workers, the oldest job goes to a worker and its listener is told.
// It returns how many jobs it assigned.
func (d *Dispatcher) Dispatch(ctx context.Context, models []string) (int, error) {
	n := 0
	for _, model := range models {
		for {
			jobs, err := d.store.QueuedJobs(ctx, model, batch)
			if err != nil {
				return n, fmt.Errorf("dispatch: queue of %s: %w", model, err)
			}
			progress := false
			for _, job := range jobs {
				if d.claims.skip(job.ID) {
					continue // its claimer takes it, looking again first
				}
				assigned, ok, err := d.Assign(ctx, job)
				if err != nil {
					return n, err
				}
				if !ok {
					continue
				}
				progress = true
				n++
				d.notify(ctx, assigned)
			}
			if !progress || len(jobs) < batch {
				break
			}
		}
	}
	return n, nil
}

// notify tells the job's listener which worker took it. A listener that is
// gone took the prompt with it: the job fails, is refunded, and frees the
// worker for the next job.
func (d *Dispatcher) notify(ctx context.Context, job store.Job) {
	msg, err := relaymsg.Encode(&relaymsg.Assign{Job: job.ID, Worker: job.Worker})
	if err == nil {
		err = d.post.Post(ctx, job.Listener, msg)
	}
	if err == nil {
		return
	}
	d.log.Warn("listener unreachable; failing job", "job", job.ID, "listener", job.Listener, "err", err)
	if _, ferr := d.store.Fail(ctx, job.ID, "listener_gone", true, d.now()); ferr != nil {
		d.log.Error("fail job after listener loss", "job", job.ID, "err", ferr)
	}
}
