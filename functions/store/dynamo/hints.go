package dynamo

import (
	"sync"

	"github.com/c0mpute/c0mpute/functions/store"
)

// maxHints bounds each hint map. When one fills up it is emptied: hints are
// an optimisation, and a miss costs one read.
const maxHints = 50_000

// hints is what this process last saw of records it is about to write, so
// that the hot path's writes need no read first. A hint is never trusted:
// every write built from one carries a condition that holds only if the hint
// is still true, and a failed condition returns the item as it is now.
type hints struct {
	mu sync.Mutex
	// jobs are jobs as last written or read by this process.
	jobs map[string]store.Job
	// workers maps a connection to its worker's account and identity
	// pubkey, which never change for the life of the connection.
	workers map[string]workerIdentity
	// allowances is each account's free allowance as last seen; most
	// accounts have none, so an unknown account is assumed to have none.
	allowances map[string]int64
	// admitted counts the requests this process admitted in each
	// rate-limit window (of a key or an account), for the counts Admit
	// reports: a transaction returns nothing on success.
	admitted map[string]int64
	// keys is each API key's spend controls and period as last seen,
	// which Admit's and a refund's writes to the key are built from; an
	// unknown key is assumed to have none (most keys), nor a period.
	keys map[string]keySpend
}

// keySpend is what a write to an API key's usage assumes of the key.
type keySpend struct {
	limit  int64
	reset  string
	period string
	// periodUsage is known (only) when the key was just read back from
	// a failed condition; a refund's first try assumes it holds the
	// job's price.
	periodUsage int64
	known       bool
}

// spendOf is what a key as stored says of its spending.
func spendOf(i secretItem) keySpend {
	return keySpend{limit: i.Limit, reset: i.Reset, period: i.Period, periodUsage: i.PeriodUsage, known: true}
}

func (h *hints) init() {
	h.jobs = map[string]store.Job{}
	h.workers = map[string]workerIdentity{}
	h.allowances = map[string]int64{}
	h.admitted = map[string]int64{}
	h.keys = map[string]keySpend{}
}

func put[V any](h *hints, m *map[string]V, k string, v V) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(*m) >= maxHints {
		*m = map[string]V{}
	}
	(*m)[k] = v
}

// get reads m under the lock: put may replace the map itself.
func get[V any](h *hints, m *map[string]V, k string) (V, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := (*m)[k]
	return v, ok
}

func (h *hints) job(id string) (store.Job, bool) { return get(h, &h.jobs, id) }

// setJob remembers a job, ended ones too: a queue read from the index
// (eventually consistent) may still list a job that was assigned or ended a
// moment ago, and the hint is what tells it stale (see freshQueued).
func (h *hints) setJob(j store.Job) { put(h, &h.jobs, j.ID, j) }

// freshQueued reports whether a job the queue index lists as queued may be
// believed: no hint of this process says it moved on since (a later
// Updated, or the same one in another state). A job requeued after being
// assigned has a later Updated than the assignment, so it is believed. When
// it is, it becomes the hint.
func (h *hints) freshQueued(j store.Job) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if known, ok := h.jobs[j.ID]; ok && known.State != store.JobQueued && !known.Updated.Before(j.Updated) {
		return false
	}
	if len(h.jobs) >= maxHints {
		h.jobs = map[string]store.Job{}
	}
	h.jobs[j.ID] = j
	return true
}

// workerIdentity is what a worker record says of whose it is.
type workerIdentity struct{ account, pubkey string }

func (h *hints) worker(conn string) (workerIdentity, bool) { return get(h, &h.workers, conn) }

func (h *hints) setWorker(w store.Worker) {
	put(h, &h.workers, w.Conn, workerIdentity{account: w.AccountID, pubkey: w.Pubkey})
}

func (h *hints) allowance(account string) int64 {
	v, _ := get(h, &h.allowances, account)
	return v
}

func (h *hints) setAllowance(account string, v int64) { put(h, &h.allowances, account, v) }

func (h *hints) key(hash string) keySpend { k, _ := get(h, &h.keys, hash); return k }

// setKey remembers a key's controls and period; its period usage, which
// every Admit changes, is never a hint.
func (h *hints) setKey(hash string, k keySpend) {
	k.periodUsage, k.known = 0, false
	put(h, &h.keys, hash, k)
}

// countAdmitted adds one to the requests this process admitted in a window
// and returns the new count. Concurrent callers get distinct counts.
func (h *hints) countAdmitted(window key) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := window.PK + "|" + window.SK
	if _, ok := h.admitted[k]; !ok && len(h.admitted) >= maxHints {
		h.admitted = map[string]int64{}
	}
	h.admitted[k]++
	return h.admitted[k]
}
