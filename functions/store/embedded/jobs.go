package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Admit implements store.Store. The checks run before any write, so an
// error leaves every record, the rate-limit counts included, as it was.
func (s *Store) Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error) {
	in := r.Job
	if err := checkAdmit(r); err != nil {
		return store.Admission{}, err
	}
	var adm store.Admission
	err := s.update(ctx, func(tx *bolt.Tx) (err error) {
		adm, err = admitTx(tx, r)
		return err
	})
	if err != nil {
		return store.Admission{}, fmt.Errorf("embedded: admit job %s: %w", in.ID, err)
	}
	return adm, nil
}

// AdmitAssign is Admit and then, in the same transaction, Assign of the
// admitted job to worker: the hot path's two writes in one when a worker is
// idle at admission. The admission's errors are Admit's, and nothing is
// written then. If worker cannot take the job (Assign's ErrConflict or
// ErrNotFound: it was taken, left, is draining or does not serve the
// model), the job is admitted queued as by Admit and assigned is false;
// the caller dispatches it as usual. Assign's checks all come before its
// first write, so the admission alone commits in that case.
func (s *Store) AdmitAssign(ctx context.Context, r store.AdmitRequest, worker string) (adm store.Admission, assigned bool, err error) {
	in := r.Job
	if err := checkAdmit(r); err != nil {
		return store.Admission{}, false, err
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		if adm, err = admitTx(tx, r); err != nil {
			return err
		}
		job, err := assignTx(tx, adm.Job, worker, in.Created)
		switch {
		case err == nil:
			adm.Job, assigned = job, true
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
			// The worker cannot take it: the job stays queued.
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return store.Admission{}, false, fmt.Errorf("embedded: admit job %s on %s: %w", in.ID, worker, err)
	}
	return adm, assigned, nil
}

// admitTx is Admit's transaction: its checks, then its writes.
func admitTx(tx *bolt.Tx, r store.AdmitRequest) (store.Admission, error) {
	in := r.Job
	var key store.Secret
	if ok, err := getJSON(tx.Bucket(bAPIKeys), []byte(r.KeyHash), &key); err != nil {
		return store.Admission{}, err
	} else if !ok {
		return store.Admission{}, fmt.Errorf("api key: %w", store.ErrNotFound)
	}
	if !key.Active() {
		return store.Admission{}, fmt.Errorf("api key %s: %w", key.ID, store.ErrRevoked)
	}
	accountID := in.AccountID
	if accountID == "" {
		accountID = key.AccountID
	} else if accountID != key.AccountID {
		return store.Admission{}, fmt.Errorf("job account %q is not the api key's account", accountID)
	}
	if key.Expired(in.Created) {
		return store.Admission{}, fmt.Errorf("api key %s: %w", key.ID, store.ErrExpired)
	}
	spent := key.Spent(in.Created)
	if key.Limit > 0 && spent+in.Price > key.Limit {
		return store.Admission{}, fmt.Errorf("api key %s: spent %d of %d, price %d: %w", key.ID, spent, key.Limit, in.Price, store.ErrKeyLimit)
	}
	jobs := tx.Bucket(bJobs)
	if jobs.Get([]byte(in.ID)) != nil {
		return store.Admission{}, fmt.Errorf("job: %w", store.ErrExists)
	}

	keyWindows := tx.Bucket(bRateWindows)
	kw := append(timeKey(r.Window), r.KeyHash...)
	var keyCount int64
	if _, err := getJSON(keyWindows, kw, &keyCount); err != nil {
		return store.Admission{}, err
	}
	if keyCount >= r.Limit {
		return store.Admission{}, fmt.Errorf("api key %s: %d of %d requests in window: %w", key.ID, keyCount, r.Limit, store.ErrRateLimited)
	}
	// The account's window is counted even without a cap, so that
	// the count is right the moment a cap is set.
	accountWindows := tx.Bucket(bAccountWindows)
	aw := append(timeKey(r.Window), accountID...)
	var accountCount int64
	if _, err := getJSON(accountWindows, aw, &accountCount); err != nil {
		return store.Admission{}, err
	}
	if r.AccountLimit > 0 && accountCount >= r.AccountLimit {
		return store.Admission{}, fmt.Errorf("account %s: %d of %d requests in window: %w",
			accountID, accountCount, r.AccountLimit, store.ErrRateLimited)
	}

	accounts := tx.Bucket(bAccounts)
	var a store.Account
	if ok, err := getJSON(accounts, []byte(accountID), &a); err != nil {
		return store.Admission{}, err
	} else if !ok {
		return store.Admission{}, fmt.Errorf("account %s: %w", accountID, store.ErrNotFound)
	}
	fromAllowance := min(max(a.FreeAllowanceLeft, 0), in.Price)
	fromCredits := in.Price - fromAllowance
	if fromCredits > a.Credits {
		return store.Admission{}, fmt.Errorf("account %s: price %d, allowance %d, credits %d: %w",
			accountID, in.Price, a.FreeAllowanceLeft, a.Credits, store.ErrInsufficientCredits)
	}

	// Every check passed: from here on only writes.
	a.FreeAllowanceLeft -= fromAllowance
	a.Credits -= fromCredits
	a.TotalSpent += in.Price
	if in.Price > 0 {
		a.LastRequest = in.Created
	}
	if err := putJSON(accounts, []byte(accountID), a); err != nil {
		return store.Admission{}, err
	}
	key.Usage += in.Price
	key.PeriodUsage, key.Period = spent+in.Price, store.PeriodOf(key.LimitReset, in.Created)
	if err := putJSON(tx.Bucket(bAPIKeys), []byte(r.KeyHash), key); err != nil {
		return store.Admission{}, err
	}
	if err := putJSON(keyWindows, kw, keyCount+1); err != nil {
		return store.Admission{}, err
	}
	if err := putJSON(accountWindows, aw, accountCount+1); err != nil {
		return store.Admission{}, err
	}
	if err := pruneRateWindows(tx, r.Window); err != nil {
		return store.Admission{}, err
	}
	job := store.Job{
		ID:            in.ID,
		AccountID:     accountID,
		Model:         in.Model,
		Price:         in.Price,
		FromAllowance: fromAllowance,
		State:         store.JobQueued,
		Listener:      in.Listener,
		Created:       in.Created,
		Updated:       in.Updated,
		Canary:        in.Canary,
		Target:        in.Target,
		Needs:         in.Needs,
		KeyHash:       r.KeyHash,
	}
	if job.Updated.IsZero() {
		job.Updated = job.Created
	}
	if err := putJSON(jobs, []byte(job.ID), job); err != nil {
		return store.Admission{}, err
	}
	if err := putEntry(tx, store.ChargeEntry(job)); err != nil {
		return store.Admission{}, err
	}
	adm := store.Admission{Job: job, KeyRequests: keyCount + 1, AccountRequests: accountCount + 1}
	if err := countQueued(tx, job, 1); err != nil {
		return store.Admission{}, err
	}
	if err := tx.Bucket(bQueue).Put(queueKey(job.Model, job.Created, job.ID), nil); err != nil {
		return store.Admission{}, err
	}
	return adm, nil
}

// checkAdmit refuses an AdmitRequest no store write should see.
func checkAdmit(r store.AdmitRequest) error {
	in := r.Job
	switch {
	case in.ID == "":
		return errors.New("embedded: admit: empty job id")
	case in.Price < 0:
		return fmt.Errorf("embedded: admit job %s: negative price %d", in.ID, in.Price)
	case r.AccountLimit < 0:
		return fmt.Errorf("embedded: admit job %s: negative account limit %d", in.ID, r.AccountLimit)
	}
	return nil
}

// pruneRateWindows deletes the rate-limit counters (keys' and accounts')
// of windows more than rateWindowRetention older than the newest window
// seen. The newest is kept rather than taken from this request so that one
// caller with a lagging clock cannot make the store forget current windows.
func pruneRateWindows(tx *bolt.Tx, window time.Time) error {
	counters := tx.Bucket(bCounters)
	var newest time.Time
	if _, err := getJSON(counters, cNewestWindow, &newest); err != nil {
		return err
	}
	if !window.After(newest) {
		return nil // nothing new can have aged out since the last prune
	}
	if err := putJSON(counters, cNewestWindow, window); err != nil {
		return err
	}
	limit := timeKey(window.Add(-rateWindowRetention))
	for _, name := range [][]byte{bRateWindows, bAccountWindows} {
		if _, err := deleteKeysBefore(tx.Bucket(name), limit, 0); err != nil {
			return err
		}
	}
	return nil
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	var j store.Job
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		j, err = loadJob(tx, id)
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("embedded: get job %s: %w", id, err)
	}
	return j, nil
}

func loadJob(tx *bolt.Tx, id string) (store.Job, error) {
	var j store.Job
	ok, err := getJSON(tx.Bucket(bJobs), []byte(id), &j)
	if err != nil {
		return store.Job{}, err
	}
	if !ok {
		return store.Job{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	return j, nil
}

// QueuedJobs implements store.Store. A limit of 0 or less returns no jobs.
func (s *Store) QueuedJobs(ctx context.Context, model string, limit int) ([]store.Job, error) {
	var out []store.Job
	err := s.view(ctx, func(tx *bolt.Tx) error {
		prefix := prefixKey(model)
		c := tx.Bucket(bQueue).Cursor()
		for k, _ := c.Seek(prefix); k != nil && len(out) < limit && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			_, id := splitQueueKey(k)
			j, err := loadJob(tx, id)
			if err != nil {
				return fmt.Errorf("queue entry %s: %w", id, err)
			}
			out = append(out, j)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: queued jobs for %s: %w", model, err)
	}
	return out, nil
}

// Assign implements store.Store.
func (s *Store) Assign(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	var job store.Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		queued, err := loadJob(tx, jobID)
		if err != nil {
			return err
		}
		job, err = assignTx(tx, queued, worker, at)
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("embedded: assign job %s to %s: %w", jobID, worker, err)
	}
	return job, nil
}

// assignTx is Assign's transaction once the job is loaded: every check
// comes before the first write, so an ErrConflict or ErrNotFound leaves
// the transaction as it found it (AdmitAssign relies on that).
func assignTx(tx *bolt.Tx, job store.Job, worker string, at time.Time) (store.Job, error) {
	w, ok, err := loadWorker(tx, worker)
	if err != nil {
		return store.Job{}, err
	}
	if !ok {
		return store.Job{}, fmt.Errorf("worker %s: %w", worker, store.ErrNotFound)
	}
	if job.State != store.JobQueued {
		return store.Job{}, fmt.Errorf("job is %s: %w", job.State, store.ErrConflict)
	}
	switch {
	case !w.Registered:
		return store.Job{}, fmt.Errorf("worker %s is not registered: %w", worker, store.ErrConflict)
	case w.Draining:
		return store.Job{}, fmt.Errorf("worker %s is draining: %w", worker, store.ErrConflict)
	case w.State != store.WorkerIdle:
		return store.Job{}, fmt.Errorf("worker %s is %s: %w", worker, w.State, store.ErrConflict)
	case !w.Serves(job.Model):
		return store.Job{}, fmt.Errorf("worker %s does not serve %s: %w", worker, job.Model, store.ErrConflict)
	}
	if err := tx.Bucket(bQueue).Delete(queueKey(job.Model, job.Created, job.ID)); err != nil {
		return store.Job{}, err
	}
	if err := countQueued(tx, job, -1); err != nil {
		return store.Job{}, err
	}
	if err := tx.Bucket(bAssigned).Put([]byte(job.ID), nil); err != nil {
		return store.Job{}, err
	}
	job.State = store.JobAssigned
	job.Worker = worker
	job.WorkerAccount = w.AccountID
	job.WorkerPubkey = w.Pubkey
	job.Attempts++
	job.Updated = at
	if err := putJSON(tx.Bucket(bJobs), []byte(job.ID), job); err != nil {
		return store.Job{}, err
	}
	w.State = store.WorkerBusy
	w.Job = job.ID
	if err := saveWorker(tx, worker, w); err != nil {
		return store.Job{}, err
	}
	return job, nil
}

// Requeue implements store.Store. The job keeps its place in the queue: it
// is indexed by its original Created time, so it goes out before younger
// jobs.
func (s *Store) Requeue(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	var job store.Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		job, err = loadJob(tx, jobID)
		if err != nil {
			return err
		}
		if job.State != store.JobAssigned || job.Worker != worker {
			return fmt.Errorf("job is %s on %q: %w", job.State, job.Worker, store.ErrConflict)
		}
		if err := freeWorker(tx, worker, jobID, 0); err != nil {
			return err
		}
		if err := tx.Bucket(bAssigned).Delete([]byte(job.ID)); err != nil {
			return err
		}
		if err := tx.Bucket(bQueue).Put(queueKey(job.Model, job.Created, job.ID), nil); err != nil {
			return err
		}
		if err := countQueued(tx, job, 1); err != nil {
			return err
		}
		job.State = store.JobQueued
		job.Worker = ""
		job.WorkerAccount = ""
		job.WorkerPubkey = ""
		job.Updated = at
		return putJSON(tx.Bucket(bJobs), []byte(job.ID), job)
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("embedded: requeue job %s from %s: %w", jobID, worker, err)
	}
	return job, nil
}

// freeWorker makes the worker idle if its record still exists and still
// holds jobID, and records a measured speed (milliTokPerSec > 0) if it still
// exists at all.
func freeWorker(tx *bolt.Tx, conn, jobID string, milliTokPerSec int64) error {
	w, ok, err := loadWorker(tx, conn)
	if err != nil || !ok {
		return err
	}
	changed := false
	if milliTokPerSec > 0 {
		w.MilliTokPerSec = milliTokPerSec
		changed = true
	}
	if w.Job == jobID {
		w.State = store.WorkerIdle
		w.Job = ""
		changed = true
	}
	if !changed {
		return nil
	}
	return saveWorker(tx, conn, w)
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	if c.Earning < 0 || c.PromptTokens < 0 || c.CompletionTokens < 0 {
		return fmt.Errorf("embedded: complete job %s: negative earning or token count", c.JobID)
	}
	if c.Receipt != nil && c.Receipt.JobID != c.JobID {
		return fmt.Errorf("embedded: complete job %s: receipt of job %q", c.JobID, c.Receipt.JobID)
	}
	if err := c.CheckShares(); err != nil {
		return fmt.Errorf("embedded: complete job %s: %w", c.JobID, err)
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		job, err := loadJob(tx, c.JobID)
		if err != nil {
			return err
		}
		switch {
		case job.State == store.JobDone:
			return nil // a retry: the first call did everything
		case job.State != store.JobAssigned || job.Worker != c.Worker:
			return fmt.Errorf("job is %s on %q: %w", job.State, job.Worker, store.ErrConflict)
		case c.Earning > job.Price:
			// An earning is a share of what was paid: more would mint credits.
			return fmt.Errorf("earning %d exceeds the job's price %d", c.Earning, job.Price)
		}
		if err := creditEarnings(tx, job, c); err != nil {
			return err
		}
		if err := freeWorker(tx, c.Worker, c.JobID, c.MilliTokPerSec); err != nil {
			return err
		}
		// The coordinator of a ring counts its own part only.
		own := c
		own.Earning = c.IdentityEarning(job.WorkerAccount, job.WorkerPubkey)
		if err := countJob(tx, job, own); err != nil {
			return err
		}
		if err := tx.Bucket(bAssigned).Delete([]byte(job.ID)); err != nil {
			return err
		}
		if c.Receipt != nil {
			r := *c.Receipt
			r.AccountID = job.AccountID
			if err := putJSON(tx.Bucket(bReceipts), []byte(job.ID), r); err != nil {
				return err
			}
		}
		if err := addMoney(tx, store.Money{Recognized: job.Paid()}); err != nil {
			return err
		}
		job.State = store.JobDone
		job.Updated = c.At
		job.PromptTokens = c.PromptTokens
		job.CompletionTokens = c.CompletionTokens
		if err := putJSON(tx.Bucket(bJobs), []byte(job.ID), job); err != nil {
			return err
		}
		return countCompletion(tx, c.CompletionTokens, c.At)
	})
	if err != nil {
		return fmt.Errorf("embedded: complete job %s on %s: %w", c.JobID, c.Worker, err)
	}
	return nil
}

// creditEarnings credits c's earning of job: all to the job's worker
// account, or each of c's Shares to its account, with an entry each. An
// account that does not exist fails the transaction, so nothing is
// credited.
func creditEarnings(tx *bolt.Tx, job store.Job, c store.Completion) error {
	if len(c.Shares) == 0 {
		return creditEarning(tx, store.EarningEntry(job, c.Earning, c.At))
	}
	for i, sh := range c.Shares {
		if err := creditEarning(tx, store.RingShareEntry(job, i, sh, c.At)); err != nil {
			return fmt.Errorf("share %d: %w", i, err)
		}
	}
	return nil
}

// creditEarning adds a worker's earning, its entry e, to its account's
// Earned, and writes the entry.
func creditEarning(tx *bolt.Tx, e store.Entry) error {
	if !e.Moves() {
		return nil
	}
	err := changeAccount(tx, e.AccountID, func(a *store.Account) error {
		a.Earned += e.Credits
		return nil
	})
	if err != nil {
		return err
	}
	if err := addMoney(tx, store.Money{Earned: e.Credits}); err != nil {
		return err
	}
	return putEntry(tx, e)
}

// GetReceipt implements store.Store.
func (s *Store) GetReceipt(ctx context.Context, jobID string) (store.Receipt, error) {
	var r store.Receipt
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := getJSON(tx.Bucket(bReceipts), []byte(jobID), &r)
		if err == nil && !ok {
			err = fmt.Errorf("receipt: %w", store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return store.Receipt{}, fmt.Errorf("embedded: get receipt of job %s: %w", jobID, err)
	}
	return r, nil
}

// countCompletion updates the Stats counters and the per-minute token
// bucket of the minute at falls in, dropping buckets too old to matter.
func countCompletion(tx *bolt.Tx, tokens int64, at time.Time) error {
	counters := tx.Bucket(bCounters)
	if err := addCounter(counters, cJobsCompleted, 1); err != nil {
		return err
	}
	if err := addCounter(counters, cTokensServed, tokens); err != nil {
		return err
	}
	minutes := tx.Bucket(bTokenMinutes)
	minute := at.Truncate(time.Minute)
	if err := addCounter(minutes, timeKey(minute), tokens); err != nil {
		return err
	}
	_, err := deleteKeysBefore(minutes, timeKey(minute.Add(-tokenMinuteRetention)), 0)
	return err
}

// Fail implements store.Store.
func (s *Store) Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (store.Job, error) {
	var job store.Job
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		job, err = failJob(tx, jobID, reason, refund, at)
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("embedded: fail job %s: %w", jobID, err)
	}
	return job, nil
}

func failJob(tx *bolt.Tx, jobID, reason string, refund bool, at time.Time) (store.Job, error) {
	job, err := loadJob(tx, jobID)
	if err != nil {
		return store.Job{}, err
	}
	switch job.State {
	case store.JobDone:
		return store.Job{}, fmt.Errorf("job is done: %w", store.ErrConflict)
	case store.JobFailed:
		if !refund || job.Refunded {
			return job, nil
		}
	case store.JobQueued:
		if err := tx.Bucket(bQueue).Delete(queueKey(job.Model, job.Created, job.ID)); err != nil {
			return store.Job{}, err
		}
		if err := countQueued(tx, job, -1); err != nil {
			return store.Job{}, err
		}
	case store.JobAssigned:
		if err := freeWorker(tx, job.Worker, job.ID, 0); err != nil {
			return store.Job{}, err
		}
		if err := tx.Bucket(bAssigned).Delete([]byte(job.ID)); err != nil {
			return store.Job{}, err
		}
	default:
		return store.Job{}, fmt.Errorf("job in unknown state %q", job.State)
	}
	// The paid part is the network's once the job ends unrefunded, and
	// the customer's again if a refund comes later.
	switch {
	case job.State != store.JobFailed && !refund:
		err = addMoney(tx, store.Money{Recognized: job.Paid()})
	case job.State == store.JobFailed && refund && !job.Refunded:
		err = addMoney(tx, store.Money{Recognized: -job.Paid()})
	}
	if err != nil {
		return store.Job{}, err
	}
	if job.State != store.JobFailed {
		job.State = store.JobFailed
		job.FailReason = reason
		job.Updated = at
	}
	if refund && !job.Refunded {
		var back int64
		err := changeAccount(tx, job.AccountID, func(a *store.Account) error {
			back = store.AllowanceBack(*a, job)
			a.Credits += job.Price - job.FromAllowance
			a.FreeAllowanceLeft += back
			a.TotalSpent -= job.Price
			return nil
		})
		if err != nil {
			return store.Job{}, err
		}
		if err := refundKey(tx, job); err != nil {
			return store.Job{}, err
		}
		if err := putEntry(tx, store.RefundEntry(job, back, at)); err != nil {
			return store.Job{}, err
		}
		job.Refunded = true
	}
	if err := putJSON(tx.Bucket(bJobs), []byte(job.ID), job); err != nil {
		return store.Job{}, err
	}
	return job, nil
}

// refundKey takes a refunded job's price back out of the usage of the key
// it was admitted with, if that key still exists: out of its period usage
// too while the key's period is still the job's (never below 0).
func refundKey(tx *bolt.Tx, job store.Job) error {
	if job.KeyHash == "" || job.Price == 0 {
		return nil
	}
	keys := tx.Bucket(bAPIKeys)
	var key store.Secret
	if ok, err := getJSON(keys, []byte(job.KeyHash), &key); err != nil || !ok {
		return err
	}
	key.Usage -= job.Price
	if key.Period == store.PeriodOf(key.LimitReset, job.Created) {
		key.PeriodUsage = max(key.PeriodUsage-job.Price, 0)
	}
	return putJSON(keys, []byte(job.KeyHash), key)
}

// Stats implements store.Store from counters: those that Admit, Assign,
// Requeue and Fail keep of the queue, those that PutWorker,
// RegisterWorker and DeleteWorker keep of the workers, and the completion
// totals. A model without queued jobs or registered workers is left out.
func (s *Store) Stats(ctx context.Context, now time.Time) (store.Stats, error) {
	st := store.Stats{WorkersByModel: map[string]int64{}, QueueByModel: map[string]int64{}}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		counters := tx.Bucket(bCounters)
		for _, c := range []struct {
			key []byte
			to  map[string]int64
		}{{cRegistered, st.WorkersByModel}, {cQueued, st.QueueByModel}} {
			var counts map[string]int64
			if _, err := getJSON(counters, c.key, &counts); err != nil {
				return err
			}
			for m, n := range counts {
				if n > 0 {
					c.to[m] = n
				}
			}
		}
		for _, c := range []struct {
			key []byte
			to  *int64
		}{{cConnected, &st.WorkersOnline}, {cJobsCompleted, &st.JobsCompleted}, {cTokensServed, &st.TokensServed}} {
			if _, err := getJSON(counters, c.key, c.to); err != nil {
				return err
			}
		}
		seen := map[string]time.Time{}
		if _, err := getJSON(counters, cSeen, &seen); err != nil {
			return err
		}
		st.RecentModels = map[string]bool{}
		for m, at := range seen {
			if s.now().Sub(at) <= store.SeenMemory { // the clock that marked them
				st.RecentModels[m] = true
			}
		}
		for m := range st.WorkersByModel {
			st.RecentModels[m] = true
		}
		lastFull := now.Truncate(time.Minute).Add(-time.Minute)
		_, err := getJSON(tx.Bucket(bTokenMinutes), timeKey(lastFull), &st.TokensLastMinute)
		return err
	})
	if err != nil {
		return store.Stats{}, fmt.Errorf("embedded: stats: %w", err)
	}
	return st, nil
}
