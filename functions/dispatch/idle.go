package dispatch

import (
	"slices"
	"sync"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// idleTTL is how long a list of idle workers read from the store is reused
// before it is read again. The list is a hint: Assign's conditional write in
// the store is the truth, a worker taken meanwhile costs one lost claim, and
// an exhausted list is always read again before a job is left queued. What
// the TTL bounds is how long a newly registered worker, or a changed speed,
// goes unseen by a dispatcher in another process (the one whose relay
// function saw the registration lists the worker at once: Registered) — and
// it saves the hot path a store read per request.
const idleTTL = 5 * time.Second

// idleCache is this dispatcher's view of which workers are idle, per model.
type idleCache struct {
	mu      sync.Mutex
	byModel map[string]*idleList
	// lent are workers this dispatcher assigned a job to, kept so that
	// Released can put them back without a store read.
	lent map[string]store.Worker
	// gen counts the times a worker came (back) into the lists; back has
	// each worker's latest. A claim that lost a race on a worker drops it
	// only if it has not come back since the loser's snapshot: under a
	// burst, a worker can be taken, serve a whole job and be released
	// while another claim on it is still in flight, and dropping it then
	// would hide an idle worker until the lists expire.
	gen  uint64
	back map[string]uint64
}

type idleList struct {
	workers []store.Worker
	read    time.Time
}

// take returns a copy of the cached idle list for model (not nil, even if
// empty), or nil if there is none younger than idleTTL, and the generation
// of the snapshot.
func (c *idleCache) take(model string, now time.Time) ([]store.Worker, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.byModel[model]
	if l == nil || now.Sub(l.read) > idleTTL {
		return nil, c.gen
	}
	return append(make([]store.Worker, 0, len(l.workers)), l.workers...), c.gen
}

// cameBack records that conn entered the lists now; c.mu is held.
func (c *idleCache) cameBack(conn string) {
	if c.back == nil || len(c.back) > 100_000 {
		c.back = map[string]uint64{}
	}
	c.gen++
	c.back[conn] = c.gen
}

// set caches a list just read from the store.
func (c *idleCache) set(model string, ws []store.Worker, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byModel == nil {
		c.byModel = map[string]*idleList{}
	}
	c.byModel[model] = &idleList{workers: append([]store.Worker(nil), ws...), read: now}
	for _, w := range ws {
		c.cameBack(w.Conn)
	}
}

// drop removes a worker from every list: it was taken, by us or another
// dispatcher. assigned says we took it, so it is remembered for Released.
// A lost claim (assigned false) made from the snapshot of generation gen
// leaves alone a worker that came back after it.
func (c *idleCache) drop(w store.Worker, assigned bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !assigned && c.back[w.Conn] > gen {
		return
	}
	for _, l := range c.byModel {
		for i := 0; i < len(l.workers); i++ {
			if l.workers[i].Conn == w.Conn {
				l.workers = append(l.workers[:i], l.workers[i+1:]...)
				i--
			}
		}
	}
	if assigned {
		if c.lent == nil || len(c.lent) > 100_000 {
			c.lent = map[string]store.Worker{}
		}
		c.lent[w.Conn] = w
	}
}

// release puts back a worker we lent out, with its new speed, in the lists
// of its models that are still fresh.
func (c *idleCache) release(conn string, milliTokPerSec int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.lent[conn]
	if !ok {
		return
	}
	delete(c.lent, conn)
	if milliTokPerSec > 0 {
		w.MilliTokPerSec = milliTokPerSec
	}
	c.list(w)
}

// forget removes a worker from every list and from the lent set.
func (c *idleCache) forget(conn string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.byModel {
		l.workers = slices.DeleteFunc(l.workers, func(w store.Worker) bool { return w.Conn == conn })
	}
	delete(c.lent, conn)
}

// judged sets a worker's standing and strikes wherever it is cached.
func (c *idleCache) judged(conn string, standing store.Standing, strikes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := func(w *store.Worker) {
		if w.Conn == conn {
			w.Standing, w.Strikes = standing, strikes
		}
	}
	for _, l := range c.byModel {
		for i := range l.workers {
			set(&l.workers[i])
		}
	}
	if w, ok := c.lent[conn]; ok {
		set(&w)
		c.lent[conn] = w
	}
}

// add lists a worker in the cached lists of its models.
func (c *idleCache) add(w store.Worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list(w)
}

// list puts w in each cached list of its models it is not in yet (a list
// read from the store meanwhile may hold it already); c.mu is held.
func (c *idleCache) list(w store.Worker) {
	c.cameBack(w.Conn)
	for _, m := range w.Models {
		if l := c.byModel[m]; l != nil && !slices.ContainsFunc(l.workers, func(x store.Worker) bool { return x.Conn == w.Conn }) {
			l.workers = append(l.workers, w)
		}
	}
}
