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
	// workerAccounts maps a connection to its worker's account, which never
	// changes for the life of the connection.
	workerAccounts map[string]string
	// allowances is each account's free allowance as last seen; most
	// accounts have none, so an unknown account is assumed to have none.
	allowances map[string]int64
	// admitted counts the requests this process admitted in each
	// rate-limit window (of a key or an account), for the counts Admit
	// reports: a transaction returns nothing on success.
	admitted map[string]int64
}

func (h *hints) init() {
	h.jobs = map[string]store.Job{}
	h.workerAccounts = map[string]string{}
	h.allowances = map[string]int64{}
	h.admitted = map[string]int64{}
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

// setJob remembers a job; ended jobs are forgotten, as nothing writes them
// on the hot path any more.
func (h *hints) setJob(j store.Job) {
	if j.State == store.JobDone {
		h.mu.Lock()
		delete(h.jobs, j.ID)
		h.mu.Unlock()
		return
	}
	put(h, &h.jobs, j.ID, j)
}

func (h *hints) workerAccount(conn string) (string, bool) {
	return get(h, &h.workerAccounts, conn)
}

func (h *hints) setWorker(w store.Worker) { put(h, &h.workerAccounts, w.Conn, w.AccountID) }

func (h *hints) allowance(account string) int64 {
	v, _ := get(h, &h.allowances, account)
	return v
}

func (h *hints) setAllowance(account string, v int64) { put(h, &h.allowances, account, v) }

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
