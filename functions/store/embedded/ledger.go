package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// The keeper ledger's buckets. They are created on first write, inside the
// ledger's own transactions, so that stores opened by older code gain them
// without a migration.
var (
	bKeeperRuns      = []byte("keeper_runs")          // run id → KeeperRun
	bKeeperTransfers = []byte("keeper_transfers")     // key → Transfer
	bKeeperByRun     = []byte("keeper_run_transfers") // run|0|seq(8)|key → ""
	bKeeperCarries   = []byte("keeper_carries")       // name → int64 (8 bytes)
	bAllowanceDays   = []byte("allowance_days")       // account|0|day → ""
	bAllowanceByDay  = []byte("allowance_by_day")     // day|0|account → "": positive allowances
)

var _ store.Ledger = (*Store)(nil)

func ledgerBuckets(tx *bolt.Tx) (runs, transfers, byRun *bolt.Bucket, err error) {
	if runs, err = tx.CreateBucketIfNotExists(bKeeperRuns); err != nil {
		return
	}
	if transfers, err = tx.CreateBucketIfNotExists(bKeeperTransfers); err != nil {
		return
	}
	byRun, err = tx.CreateBucketIfNotExists(bKeeperByRun)
	return
}

func runPrefix(run string) []byte { return append([]byte(run), 0) }

func byRunKey(run string, seq int, key string) []byte {
	k := runPrefix(run)
	k = binary.BigEndian.AppendUint64(k, uint64(seq))
	return append(k, key...)
}

func getRun(b *bolt.Bucket, id string) (store.KeeperRun, error) {
	var r store.KeeperRun
	if b == nil {
		return r, store.ErrNotFound
	}
	ok, err := getJSON(b, []byte(id), &r)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	return r, err
}

// StartRun implements store.Ledger.
func (s *Store) StartRun(ctx context.Context, r store.KeeperRun) (store.KeeperRun, bool, error) {
	if r.ID == "" {
		return store.KeeperRun{}, false, errors.New("embedded: start run: empty id")
	}
	created := false
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, _, _, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		stored, err := getRun(runs, r.ID)
		if err == nil {
			r = stored
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		r.State, r.Transfers, r.Updated = store.RunPlanning, 0, r.Created
		created = true
		return putJSON(runs, []byte(r.ID), r)
	})
	if err != nil {
		return store.KeeperRun{}, false, fmt.Errorf("embedded: start run %s: %w", r.ID, err)
	}
	return r, created, nil
}

// GetRun implements store.Ledger.
func (s *Store) GetRun(ctx context.Context, id string) (store.KeeperRun, error) {
	var r store.KeeperRun
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		r, err = getRun(tx.Bucket(bKeeperRuns), id)
		return err
	})
	if err != nil {
		return store.KeeperRun{}, fmt.Errorf("embedded: get run %s: %w", id, err)
	}
	return r, nil
}

// planning loads a run that must still be planning.
func planning(runs *bolt.Bucket, id string) (store.KeeperRun, error) {
	r, err := getRun(runs, id)
	if err != nil {
		return r, err
	}
	if r.State != store.RunPlanning {
		return r, fmt.Errorf("run is %s: %w", r.State, store.ErrConflict)
	}
	return r, nil
}

// ResetPlan implements store.Ledger.
func (s *Store) ResetPlan(ctx context.Context, run string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, transfers, byRun, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		if _, err := planning(runs, run); err != nil {
			return err
		}
		var idx [][]byte
		c := byRun.Cursor()
		p := runPrefix(run)
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			idx = append(idx, bytes.Clone(k))
		}
		for _, k := range idx {
			if err := transfers.Delete(k[len(p)+8:]); err != nil {
				return err
			}
			if err := byRun.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: reset plan %s: %w", run, err)
	}
	return nil
}

// AddTransfers implements store.Ledger.
func (s *Store) AddTransfers(ctx context.Context, run string, ts []store.Transfer, at time.Time) error {
	if len(ts) > store.MaxTransfersPerAdd {
		return fmt.Errorf("embedded: add transfers to %s: %d transfers in one call, at most %d", run, len(ts), store.MaxTransfersPerAdd)
	}
	for _, t := range ts {
		if t.Key == "" || t.Amount <= 0 || t.Seq < 0 {
			return fmt.Errorf("embedded: add transfers to %s: transfer %q needs a key, a positive amount and a seq", run, t.Key)
		}
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, transfers, byRun, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		if _, err := planning(runs, run); err != nil {
			return err
		}
		for _, t := range ts {
			if transfers.Get([]byte(t.Key)) != nil {
				return fmt.Errorf("transfer %s: %w", t.Key, store.ErrExists)
			}
			t.Run, t.State, t.Signature, t.LastValidBlockHeight, t.Attempts, t.Reason = run, store.TransferPlanned, "", 0, 0, ""
			t.Created, t.Updated = at, at
			if err := putJSON(transfers, []byte(t.Key), t); err != nil {
				return err
			}
			if err := byRun.Put(byRunKey(run, t.Seq, t.Key), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: add transfers to %s: %w", run, err)
	}
	return nil
}

func countRun(byRun *bolt.Bucket, run string) int {
	n := 0
	c := byRun.Cursor()
	p := runPrefix(run)
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		n++
	}
	return n
}

// SealPlan implements store.Ledger.
func (s *Store) SealPlan(ctx context.Context, run string, count int, summary string, at time.Time) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, _, byRun, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		r, err := getRun(runs, run)
		if err != nil {
			return err
		}
		switch {
		case r.State == store.RunSealed && r.Transfers == count:
			return nil
		case r.State != store.RunPlanning:
			return fmt.Errorf("run is %s: %w", r.State, store.ErrConflict)
		}
		if n := countRun(byRun, run); n != count {
			return fmt.Errorf("run holds %d transfers, plan has %d: %w", n, count, store.ErrConflict)
		}
		r.State, r.Transfers, r.Summary, r.Updated = store.RunSealed, count, summary, at
		return putJSON(runs, []byte(run), r)
	})
	if err != nil {
		return fmt.Errorf("embedded: seal plan %s: %w", run, err)
	}
	return nil
}

// GetTransfer implements store.Ledger.
func (s *Store) GetTransfer(ctx context.Context, key string) (store.Transfer, error) {
	var t store.Transfer
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok := false
		var err error
		if b := tx.Bucket(bKeeperTransfers); b != nil {
			ok, err = getJSON(b, []byte(key), &t)
		}
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Transfer{}, fmt.Errorf("embedded: get transfer %s: %w", key, err)
	}
	return t, nil
}

// RunTransfers implements store.Ledger.
func (s *Store) RunTransfers(ctx context.Context, run string) ([]store.Transfer, error) {
	var out []store.Transfer
	err := s.view(ctx, func(tx *bolt.Tx) error {
		byRun, transfers := tx.Bucket(bKeeperByRun), tx.Bucket(bKeeperTransfers)
		if byRun == nil || transfers == nil {
			return nil
		}
		c := byRun.Cursor()
		p := runPrefix(run)
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			var t store.Transfer
			ok, err := getJSON(transfers, k[len(p)+8:], &t)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("index names missing transfer %q", k[len(p)+8:])
			}
			out = append(out, t)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: run transfers %s: %w", run, err)
	}
	return out, nil
}

// loadTransfers reads keys for an update, all or an error.
func loadTransfers(transfers *bolt.Bucket, keys []string) ([]store.Transfer, error) {
	out := make([]store.Transfer, 0, len(keys))
	for _, k := range keys {
		var t store.Transfer
		ok, err := getJSON(transfers, []byte(k), &t)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("transfer %s: %w", k, store.ErrNotFound)
		}
		out = append(out, t)
	}
	return out, nil
}

// MarkSent implements store.Ledger.
func (s *Store) MarkSent(ctx context.Context, keys []string, prev, sig string, lastValid uint64, at time.Time) error {
	if sig == "" || len(keys) == 0 {
		return errors.New("embedded: mark sent: empty signature or no transfers")
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, transfers, _, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		ts, err := loadTransfers(transfers, keys)
		if err != nil {
			return err
		}
		sealed := map[string]bool{}
		for _, t := range ts {
			if _, ok := sealed[t.Run]; !ok {
				r, err := getRun(runs, t.Run)
				if err != nil {
					return err
				}
				sealed[t.Run] = r.State == store.RunSealed
			}
			if !sealed[t.Run] {
				return fmt.Errorf("run %s is not sealed: %w", t.Run, store.ErrConflict)
			}
			okPlanned := prev == "" && t.State == store.TransferPlanned
			okResend := prev != "" && t.State == store.TransferSent && t.Signature == prev
			if !okPlanned && !okResend {
				return fmt.Errorf("transfer %s is %s under %q, not under %q: %w", t.Key, t.State, t.Signature, prev, store.ErrConflict)
			}
		}
		for _, t := range ts {
			t.State, t.Signature, t.LastValidBlockHeight, t.Updated = store.TransferSent, sig, lastValid, at
			t.Attempts++
			if err := putJSON(transfers, []byte(t.Key), t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: mark sent %s: %w", sig, err)
	}
	return nil
}

// Settle implements store.Ledger.
func (s *Store) Settle(ctx context.Context, keys []string, sig string, state store.TransferState, reason string, at time.Time) error {
	if state != store.TransferConfirmed && state != store.TransferFailed {
		return fmt.Errorf("embedded: settle: %q is not a final state", state)
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		_, transfers, _, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		ts, err := loadTransfers(transfers, keys)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.Signature != sig || (t.State != store.TransferSent && t.State != state) {
				return fmt.Errorf("transfer %s is %s under %q: %w", t.Key, t.State, t.Signature, store.ErrConflict)
			}
		}
		for _, t := range ts {
			if t.State == state {
				continue
			}
			t.State, t.Reason, t.Updated = state, reason, at
			if err := putJSON(transfers, []byte(t.Key), t); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: settle %s: %w", sig, err)
	}
	return nil
}

// OpenRuns implements store.Ledger.
func (s *Store) OpenRuns(ctx context.Context, prefix string) ([]store.KeeperRun, error) {
	out := []store.KeeperRun{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		runs := tx.Bucket(bKeeperRuns)
		if runs == nil {
			return nil
		}
		c := runs.Cursor()
		for k, v := c.Seek([]byte(prefix)); k != nil && bytes.HasPrefix(k, []byte(prefix)); k, v = c.Next() {
			var r store.KeeperRun
			if err := decode(k, v, &r); err != nil {
				return err
			}
			if r.State != store.RunDone {
				out = append(out, r)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: open runs %q: %w", prefix, err)
	}
	return out, nil
}

// RequestPayout implements store.Earnings.
func (s *Store) RequestPayout(ctx context.Context, accountID string, at time.Time) (store.Account, error) {
	var a store.Account
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return changeAccount(tx, accountID, func(acct *store.Account) error {
			if acct.PayoutRequested.IsZero() {
				acct.PayoutRequested = at.UTC()
			}
			a = *acct
			return nil
		})
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("embedded: request payout of %s: %w", accountID, err)
	}
	return a, nil
}

// FinishRun implements store.Ledger.
func (s *Store) FinishRun(ctx context.Context, run string, carries map[string]int64, at time.Time) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		runs, _, _, err := ledgerBuckets(tx)
		if err != nil {
			return err
		}
		r, err := getRun(runs, run)
		if err != nil {
			return err
		}
		switch r.State {
		case store.RunDone:
			return nil
		case store.RunSealed:
		default:
			return fmt.Errorf("run is %s: %w", r.State, store.ErrConflict)
		}
		cb, err := tx.CreateBucketIfNotExists(bKeeperCarries)
		if err != nil {
			return err
		}
		for name, v := range carries {
			if err := cb.Put([]byte(name), binary.BigEndian.AppendUint64(nil, uint64(v))); err != nil {
				return err
			}
		}
		r.State, r.Updated, r.Completed = store.RunDone, at, at
		return putJSON(runs, []byte(run), r)
	})
	if err != nil {
		return fmt.Errorf("embedded: finish run %s: %w", run, err)
	}
	return nil
}

// Carry implements store.Ledger.
func (s *Store) Carry(ctx context.Context, name string) (int64, error) {
	var v int64
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bKeeperCarries)
		if b == nil {
			return nil
		}
		if raw := b.Get([]byte(name)); raw != nil {
			if len(raw) != 8 {
				return fmt.Errorf("carry %s: corrupt value", name)
			}
			v = int64(binary.BigEndian.Uint64(raw))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("embedded: carry %s: %w", name, err)
	}
	return v, nil
}

// SetDailyAllowance implements store.Ledger.
func (s *Store) SetDailyAllowance(ctx context.Context, accountID, day string, credits int64) (bool, error) {
	if accountID == "" || day == "" || credits < 0 {
		return false, fmt.Errorf("embedded: set allowance: account %q, day %q, credits %d", accountID, day, credits)
	}
	applied := false
	err := s.update(ctx, func(tx *bolt.Tx) error {
		days, err := tx.CreateBucketIfNotExists(bAllowanceDays)
		if err != nil {
			return err
		}
		k := append(append([]byte(accountID), 0), day...)
		if days.Get(k) != nil {
			return nil
		}
		err = changeAccount(tx, accountID, func(a *store.Account) error {
			a.FreeAllowanceLeft, a.AllowanceDay = credits, day
			return nil
		})
		if err != nil {
			return err
		}
		if err := putEntry(tx, store.AllowanceEntry(accountID, day, credits, s.now())); err != nil {
			return err
		}
		if credits > 0 {
			byDay, err := tx.CreateBucketIfNotExists(bAllowanceByDay)
			if err != nil {
				return err
			}
			if err := byDay.Put(append(append([]byte(day), 0), accountID...), nil); err != nil {
				return err
			}
		}
		applied = true
		return days.Put(k, nil)
	})
	if err != nil {
		return false, fmt.Errorf("embedded: set allowance of %s for %s: %w", accountID, day, err)
	}
	return applied, nil
}

// AllowanceAccounts implements store.Ledger.
func (s *Store) AllowanceAccounts(ctx context.Context, day string) ([]string, error) {
	out := []string{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bAllowanceByDay)
		if b == nil {
			return nil
		}
		p := append([]byte(day), 0)
		c := b.Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			out = append(out, string(k[len(p):]))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: allowance accounts of %s: %w", day, err)
	}
	return out, nil
}

// bPayoutKeys holds the idempotency keys of AdjustPaidOut, kept forever.
var bPayoutKeys = []byte("payout_keys")

var _ store.Earnings = (*Store)(nil)

// OwedEarnings implements store.Earnings by scanning the accounts: a daily
// keeper job on one machine's store.
func (s *Store) OwedEarnings(ctx context.Context, minimum int64) ([]store.Owed, error) {
	if minimum < 1 {
		return nil, fmt.Errorf("embedded: owed earnings: minimum %d, want at least 1", minimum)
	}
	var out []store.Owed
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bAccounts).ForEach(func(k, v []byte) error {
			var a store.Account
			if err := decode(k, v, &a); err != nil {
				return err
			}
			if owed := a.Earned - a.PaidOut; owed >= minimum {
				out = append(out, store.Owed{AccountID: a.ID, Wallet: a.Wallet, Credits: owed, Requested: !a.PayoutRequested.IsZero()})
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: owed earnings: %w", err)
	}
	return out, nil
}

// AdjustPaidOut implements store.Earnings.
func (s *Store) AdjustPaidOut(ctx context.Context, accountID string, delta int64, key string) (bool, error) {
	if key == "" || delta == 0 {
		return false, fmt.Errorf("embedded: adjust paid out of %s: empty key or zero delta", accountID)
	}
	applied := false
	err := s.update(ctx, func(tx *bolt.Tx) error {
		keys, err := tx.CreateBucketIfNotExists(bPayoutKeys)
		if err != nil {
			return err
		}
		if keys.Get([]byte(key)) != nil {
			return nil
		}
		err = changeAccount(tx, accountID, func(a *store.Account) error {
			if p := a.PaidOut + delta; p < 0 || p > a.Earned {
				return fmt.Errorf("paid out %d%+d against earned %d: %w", a.PaidOut, delta, a.Earned, store.ErrInsufficientCredits)
			}
			a.PaidOut += delta
			if delta > 0 {
				a.PayoutRequested = time.Time{}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := putEntry(tx, store.PayoutEntry(accountID, delta, key, s.now())); err != nil {
			return err
		}
		if err := addMoney(tx, store.Money{PaidOut: delta}); err != nil {
			return err
		}
		applied = true
		return keys.Put([]byte(key), nil)
	})
	if err != nil {
		return false, fmt.Errorf("embedded: adjust paid out of %s by %d (%s): %w", accountID, delta, key, err)
	}
	return applied, nil
}

// MoneyTotals implements store.Earnings.
func (s *Store) MoneyTotals(ctx context.Context) (store.Money, error) {
	var m store.Money
	err := s.view(ctx, func(tx *bolt.Tx) error {
		_, err := getJSON(tx.Bucket(bCounters), cMoney, &m)
		return err
	})
	if err != nil {
		return store.Money{}, fmt.Errorf("embedded: money totals: %w", err)
	}
	return m, nil
}
