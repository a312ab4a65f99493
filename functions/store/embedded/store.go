// Package embedded is the one-machine store: store.Store on a bbolt file,
// for the local stack and for single-host deployments.
//
// Layout: one bolt bucket per record kind, JSON values, plus a few index
// buckets whose keys sort the way the queries need (the per-model queue by
// (Created, ID), secrets by (account, CreatedAt), live workers by token,
// rate windows and nonce expiries by time, the workers dispatch may pick
// by connection); reputations are keyed by
// account then pubkey, so that an account's identities sort together, and
// ledger entries by account then entry id (time first); deposit intents by
// account then id, with index buckets by reference, by account then time
// and by time (their values the intent's key). Every
// method runs in one bolt transaction, so every multi-record change is
// atomic, and bolt runs one writer at a time, so check-then-write inside a
// transaction cannot race.
//
// Connections do not survive a restart: Open deletes every Worker and
// Listener record and fails (with a refund) every job left queued or
// assigned, because the prompts those jobs needed lived only in the memory
// of the process that died.
package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// Bucket names. Index buckets hold empty values (the deposit indexes, the
// intent's key); their keys carry the order.
var (
	bAccounts         = []byte("accounts")            // account id → Account
	bGrants           = []byte("grants")              // idempotency key → grant record, kept forever
	bAPIKeys          = []byte("api_keys")            // hash → Secret
	bAPIKeysByAccount = []byte("api_keys_by_account") // account|created|hash → ""
	bTokens           = []byte("worker_tokens")       // hash → Secret
	bTokensByAccount  = []byte("worker_tokens_by_account")
	bNonces           = []byte("nonces")               // nonce → expiry
	bNonceExpiry      = []byte("nonce_expiry")         // expiry|nonce → ""
	bJobs             = []byte("jobs")                 // job id → Job
	bQueue            = []byte("queue")                // model|created|id → ""
	bAssigned         = []byte("assigned")             // job id → "" for assigned jobs
	bRateWindows      = []byte("rate_windows")         // window|key hash → count
	bAccountWindows   = []byte("account_rate_windows") // window|account id → count
	bWorkers          = []byte("workers")              // conn → Worker
	bWorkersByToken   = []byte("workers_by_token")     // token hash|conn → "" for workers with a token
	bListeners        = []byte("listeners")            // conn → Listener
	bIdleWorkers      = []byte("idle_workers")         // conn → "" for the workers IdleWorkers lists
	bCounters         = []byte("counters")             // name → int64 or time
	bTokenMinutes     = []byte("token_minutes")        // minute → completion tokens
	bReceipts         = []byte("receipts")             // job id → Receipt, for completed jobs
	bReputations      = []byte("reputations")          // account|pubkey → Reputation, kept forever
	bTokenStandings   = []byte("token_standings")      // worker token hash → tokenStanding, kept forever
	bVerdicts         = []byte("verdicts")             // job id|pubkey → verdict applied, kept forever
	bEntries          = []byte("account_entries")      // account|entry id → Entry, kept forever
	bDeposits         = []byte("deposits")             // account|intent id → Deposit, kept forever
	bDepositRefs      = []byte("deposit_refs")         // reference → account|intent id
	bDepositsByAcct   = []byte("deposits_by_account")  // account|created|intent id → account|intent id
	bDepositsByTime   = []byte("deposits_by_time")     // created|account|intent id → account|intent id
	bPaidTo           = []byte("paid_to")              // wallet|account → nil: proven payout wallets
)

var allBuckets = [][]byte{
	bAccounts, bGrants, bAPIKeys, bAPIKeysByAccount, bTokens, bTokensByAccount,
	bNonces, bNonceExpiry, bJobs, bQueue, bAssigned, bRateWindows, bAccountWindows,
	bWorkers, bWorkersByToken, bListeners, bIdleWorkers, bCounters, bTokenMinutes, bReceipts,
	bReputations, bTokenStandings, bVerdicts, bEntries,
	bDeposits, bDepositRefs, bDepositsByAcct, bDepositsByTime, bPaidTo,
}

// Counter keys.
var (
	cJobsCompleted = []byte("jobs_completed")
	cTokensServed  = []byte("tokens_served")
	cNewestWindow  = []byte("newest_rate_window")
	// cMoney holds the store.Money totals.
	cMoney = []byte("money")
	// cQueued counts queued jobs by model, cRegistered registered
	// workers by model they serve, and cConnected connected workers: Stats
	// reads them instead of the records. Each changes in the transaction
	// that changes the state it counts.
	cQueued     = []byte("queued_by_model")
	cRegistered = []byte("registered_by_model")
	// cSeen is when a worker of each model last registered or left.
	cSeen      = []byte("seen_by_model")
	cConnected = []byte("workers_connected")
)

// ErrLocked is Open finding the file held by another process (bolt locks
// it for the process that has it open).
var ErrLocked = errors.New("another process holds the store")

const (
	// openTimeout bounds the wait for bolt's file lock: a second process on
	// the same file should fail fast with a clear error, not hang.
	openTimeout = 2 * time.Second

	// rateWindowRetention is how far behind the newest window a rate-limit
	// counter is kept. Windows are one minute (SPEC: 60 requests/minute), so
	// two minutes covers a caller whose clock lags the newest writer's.
	rateWindowRetention = 2 * time.Minute

	// tokenMinuteRetention is how many per-minute token buckets are kept
	// behind the newest one. Stats only reads the last full minute; a few
	// more absorb completions reported slightly out of order.
	tokenMinuteRetention = 5 * time.Minute

	// nonceSweepBatch bounds how many expired nonces one UseNonce deletes,
	// so that sign-in latency does not depend on the backlog.
	nonceSweepBatch = 64

	// restartFailReason is the FailReason of jobs failed by Open.
	restartFailReason = "gateway_restart"
)

// Store implements store.Store on a bbolt database file.
type Store struct {
	db *bolt.DB
	// now is the clock UseNonce judges expiry by; the interface passes no
	// "now" to it. Everything else takes its times from the caller.
	now func() time.Time
	// maxConns is the most live workers one worker token may hold.
	maxConns int
}

var _ store.Store = (*Store)(nil)

type options struct {
	noSync   bool
	readOnly bool
	maxConns int
}

// Option configures Open.
type Option func(*options)

// WithNoSync skips fsync after each commit (bolt NoSync). A crash can then
// lose recent commits, so it is for tests and benchmarks only.
func WithNoSync() Option { return func(o *options) { o.noSync = true } }

// ReadOnly opens an existing store for reading only, as a keeper's dry run
// does: the file is neither created nor changed (Open resets nothing, and
// every write fails with bolt's ErrDatabaseReadOnly). Other readers may
// hold the file at the same time; a process holding it open for writing
// (a running gateway) makes Open fail after a short wait.
func ReadOnly() Option { return func(o *options) { o.readOnly = true } }

// WithMaxConnsPerToken sets the most live workers one worker token may
// hold [store.MaxConnsPerToken], for tests and benchmarks that need another
// cap; n must be at least 1.
func WithMaxConnsPerToken(n int) Option { return func(o *options) { o.maxConns = n } }

// Open opens (creating if needed) the store at path. It deletes every worker
// and listener record and fails with a refund every queued or assigned job:
// those belonged to connections and in-memory prompts of a process that is
// gone. With ReadOnly it does neither, and the file must exist.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{maxConns: store.MaxConnsPerToken}
	for _, opt := range opts {
		opt(&o)
	}
	if o.maxConns < 1 {
		return nil, fmt.Errorf("embedded: open %s: max connections per token %d, want at least 1", path, o.maxConns)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: openTimeout, NoSync: o.noSync, ReadOnly: o.readOnly})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("embedded: open %s: %w (a running gateway or keeper?)", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	s := &Store{db: db, now: time.Now, maxConns: o.maxConns}
	if o.readOnly {
		// Reads assume every bucket exists (Open creates them): a file
		// without them is not a store this code can read.
		if err := db.View(func(tx *bolt.Tx) error {
			for _, name := range allBuckets {
				if tx.Bucket(name) == nil {
					return fmt.Errorf("no %s bucket: not a c0mpute store, or one never opened for writing", name)
				}
			}
			return nil
		}); err != nil {
			return nil, errors.Join(fmt.Errorf("embedded: open %s read-only: %w", path, err), db.Close())
		}
		return s, nil
	}
	if err := db.Update(func(tx *bolt.Tx) error { return s.reset(tx, time.Now()) }); err != nil {
		return nil, errors.Join(fmt.Errorf("embedded: open %s: %w", path, err), db.Close())
	}
	return s, nil
}

// reset creates the buckets and drops what did not survive the restart.
func (s *Store) reset(tx *bolt.Tx, now time.Time) error {
	for _, name := range allBuckets {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	var dead []string
	err := tx.Bucket(bQueue).ForEach(func(k, _ []byte) error {
		_, id := splitQueueKey(k)
		dead = append(dead, id)
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket(bAssigned).ForEach(func(k, _ []byte) error {
		dead = append(dead, string(k))
		return nil
	})
	if err != nil {
		return err
	}
	for _, id := range dead {
		if _, err := failJob(tx, id, restartFailReason, true, now); err != nil {
			return fmt.Errorf("fail job %s left from before the restart: %w", id, err)
		}
	}
	for _, name := range [][]byte{bWorkers, bWorkersByToken, bListeners, bIdleWorkers} {
		if err := tx.DeleteBucket(name); err != nil {
			return fmt.Errorf("clear bucket %s: %w", name, err)
		}
		if _, err := tx.CreateBucket(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	// No job is queued and no worker connected now: the counts start from
	// zero (which also starts them right on a file from before they were
	// kept).
	for _, name := range [][]byte{cQueued, cRegistered, cConnected} {
		if err := tx.Bucket(bCounters).Delete(name); err != nil {
			return fmt.Errorf("clear counter %s: %w", name, err)
		}
	}
	return nil
}

// Close closes the database file.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("embedded: close: %w", err)
	}
	return nil
}

func (s *Store) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

func (s *Store) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

// getJSON decodes the value at key into v; ok is false when there is none.
func getJSON(b *bolt.Bucket, key []byte, v any) (ok bool, err error) {
	raw := b.Get(key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("decode %q: %w", key, err)
	}
	return true, nil
}

// decode decodes a value found by a cursor or ForEach.
func decode(k, v []byte, out any) error {
	if err := json.Unmarshal(v, out); err != nil {
		return fmt.Errorf("decode %q: %w", k, err)
	}
	return nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %q: %w", key, err)
	}
	return b.Put(key, raw)
}

// addCounter adds delta to an int64 counter.
func addCounter(b *bolt.Bucket, key []byte, delta int64) error {
	var n int64
	if _, err := getJSON(b, key, &n); err != nil {
		return err
	}
	return putJSON(b, key, n+delta)
}

// addByModel adds delta to the count of each of models under the counter
// key, once per distinct model; a count that reaches zero is dropped.
func addByModel(tx *bolt.Tx, key []byte, delta int64, models ...string) error {
	if delta == 0 || len(models) == 0 {
		return nil
	}
	b := tx.Bucket(bCounters)
	counts := map[string]int64{}
	if _, err := getJSON(b, key, &counts); err != nil {
		return err
	}
	seen := make(map[string]bool, len(models))
	for _, m := range models {
		if seen[m] {
			continue
		}
		seen[m] = true
		if counts[m] += delta; counts[m] == 0 {
			delete(counts, m)
		}
	}
	return putJSON(b, key, counts)
}

// countWorker counts a worker record in (delta 1) or out (-1) at at:
// connected, and, registered, under each model it serves.
func countWorker(tx *bolt.Tx, w store.Worker, delta int64, at time.Time) error {
	if err := addCounter(tx.Bucket(bCounters), cConnected, delta); err != nil {
		return err
	}
	return countRegistered(tx, w, delta, at)
}

// countRegistered counts a registered worker's models in or out, and
// marks them seen at at.
func countRegistered(tx *bolt.Tx, w store.Worker, delta int64, at time.Time) error {
	if !w.Registered {
		return nil
	}
	if err := markSeen(tx, at, w.Models); err != nil {
		return err
	}
	return addByModel(tx, cRegistered, delta, w.Models...)
}

// markSeen records at as the last time a worker of each of models was
// seen (Stats.LastSeenByModel), forgetting models not seen for a day.
func markSeen(tx *bolt.Tx, at time.Time, models []string) error {
	b := tx.Bucket(bCounters)
	seen := map[string]time.Time{}
	if _, err := getJSON(b, cSeen, &seen); err != nil {
		return err
	}
	for _, m := range models {
		if at.After(seen[m]) {
			seen[m] = at
		}
	}
	maps.DeleteFunc(seen, func(_ string, t time.Time) bool { return at.Sub(t) > 24*time.Hour })
	return putJSON(b, cSeen, seen)
}

// countQueued counts a job into (1) or out of (-1) its model's queue.
func countQueued(tx *bolt.Tx, j store.Job, delta int64) error {
	return addByModel(tx, cQueued, delta, j.Model)
}

// addMoney adds d to the store.Money totals.
func addMoney(tx *bolt.Tx, d store.Money) error {
	b := tx.Bucket(bCounters)
	var m store.Money
	if _, err := getJSON(b, cMoney, &m); err != nil {
		return err
	}
	return putJSON(b, cMoney, m.Add(d))
}

// timeKey encodes t so that byte order is time order: big-endian nanoseconds
// with the sign bit flipped, so times before 1970 still sort first.
func timeKey(t time.Time) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], uint64(t.UnixNano())^(1<<63))
	return k[:]
}

// sep ends the string part of a composite key; ids never contain NUL.
const sep = 0

// prefixKey is s followed by the separator: the prefix of composite keys
// that start with s.
func prefixKey(s string) []byte {
	return append([]byte(s), sep)
}

func queueKey(model string, created time.Time, id string) []byte {
	k := prefixKey(model)
	k = append(k, timeKey(created)...)
	return append(k, id...)
}

func splitQueueKey(k []byte) (model, id string) {
	for i, c := range k {
		if c == sep {
			return string(k[:i]), string(k[i+1+8:])
		}
	}
	return "", ""
}

func secretIndexKey(s store.Secret) []byte {
	k := prefixKey(s.AccountID)
	k = append(k, timeKey(s.CreatedAt)...)
	return append(k, s.Hash...)
}

// deleteKeysBefore deletes, from the start of a time-keyed bucket, the keys
// that sort before limit, at most max of them (0: no maximum), and returns
// the deleted keys. Keys are collected first because deleting under a bolt
// cursor skips entries.
func deleteKeysBefore(b *bolt.Bucket, limit []byte, max int) ([][]byte, error) {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.First(); k != nil && string(k) < string(limit); k, _ = c.Next() {
		if max > 0 && len(keys) == max {
			break
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
