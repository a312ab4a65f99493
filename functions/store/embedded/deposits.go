package embedded

import (
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// depositKey is an intent's key in bDeposits, and the value of its index
// entries.
func depositKey(accountID, id string) []byte { return append(prefixKey(accountID), id...) }

// depositByAccountKey orders an account's intents by Created, then id.
func depositByAccountKey(d store.Deposit) []byte {
	return append(append(prefixKey(d.AccountID), timeKey(d.Created)...), d.ID...)
}

// depositByTimeKey orders every intent by Created, then account and id.
func depositByTimeKey(d store.Deposit) []byte {
	return append(timeKey(d.Created), depositKey(d.AccountID, d.ID)...)
}

// PutDeposit implements store.Deposits: the intent, its reference and its
// two index entries.
func (s *Store) PutDeposit(ctx context.Context, d store.Deposit) error {
	d, err := d.Fresh()
	if err == nil {
		err = s.update(ctx, func(tx *bolt.Tx) error {
			deposits, refs := tx.Bucket(bDeposits), tx.Bucket(bDepositRefs)
			k := depositKey(d.AccountID, d.ID)
			if deposits.Get(k) != nil {
				return fmt.Errorf("id: %w", store.ErrExists)
			}
			if refs.Get([]byte(d.Reference)) != nil {
				return fmt.Errorf("reference %s: %w", d.Reference, store.ErrExists)
			}
			if err := putJSON(deposits, k, d); err != nil {
				return err
			}
			if err := refs.Put([]byte(d.Reference), k); err != nil {
				return err
			}
			if err := tx.Bucket(bDepositsByAcct).Put(depositByAccountKey(d), k); err != nil {
				return err
			}
			return tx.Bucket(bDepositsByTime).Put(depositByTimeKey(d), k)
		})
	}
	if err != nil {
		return fmt.Errorf("embedded: put deposit %s of %s: %w", d.ID, d.AccountID, err)
	}
	return nil
}

// getDeposit reads the intent at key k; ErrNotFound if there is none.
func getDeposit(tx *bolt.Tx, k []byte) (store.Deposit, error) {
	var d store.Deposit
	ok, err := getJSON(tx.Bucket(bDeposits), k, &d)
	if err == nil && !ok {
		err = fmt.Errorf("deposit intent: %w", store.ErrNotFound)
	}
	return d, err
}

// GetDeposit implements store.Deposits.
func (s *Store) GetDeposit(ctx context.Context, accountID, id string) (store.Deposit, error) {
	var d store.Deposit
	err := s.view(ctx, func(tx *bolt.Tx) (err error) {
		d, err = getDeposit(tx, depositKey(accountID, id))
		return err
	})
	if err != nil {
		return store.Deposit{}, fmt.Errorf("embedded: get deposit %s of %s: %w", id, accountID, err)
	}
	return d, nil
}

// ListDeposits implements store.Deposits: the account's index entries,
// walked backwards from its last.
func (s *Store) ListDeposits(ctx context.Context, accountID string, limit int) ([]store.Deposit, error) {
	out := []store.Deposit{}
	err := store.CheckDepositsLimit(limit)
	if err == nil {
		err = s.view(ctx, func(tx *bolt.Tx) error {
			return eachBefore(tx.Bucket(bDepositsByAcct), prefixKey(accountID), prefixEnd(accountID), func(_, k []byte) (bool, error) {
				d, err := getDeposit(tx, k)
				out = append(out, d)
				return len(out) < limit, err
			})
		})
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: list deposits of %s: %w", accountID, err)
	}
	return out, nil
}

// OpenDeposits implements store.Deposits: the time index from since on.
func (s *Store) OpenDeposits(ctx context.Context, since time.Time, limit int) ([]store.Deposit, error) {
	out := []store.Deposit{}
	err := store.CheckDepositsLimit(limit)
	if err == nil {
		err = s.view(ctx, func(tx *bolt.Tx) error {
			c := tx.Bucket(bDepositsByTime).Cursor()
			for k, v := c.Seek(timeKey(since)); k != nil && len(out) < limit; k, v = c.Next() {
				d, err := getDeposit(tx, v)
				if err != nil {
					return err
				}
				out = append(out, d)
			}
			return nil
		})
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: open deposits since %v: %w", since, err)
	}
	return out, nil
}

// CreditDeposit implements store.Deposits in one transaction: the checks
// in the contract's order, then Grant's change (with the same idempotency
// record) and the intent's.
func (s *Store) CreditDeposit(ctx context.Context, c store.DepositCredit) (store.Deposit, bool, error) {
	var d store.Deposit
	applied := false
	err := c.Check()
	if err == nil {
		err = s.update(ctx, func(tx *bolt.Tx) error {
			k := depositKey(c.AccountID, c.DepositID)
			var err error
			if d, err = getDeposit(tx, k); err != nil || granted(tx, store.DepositKey(c.Signature)) {
				return err
			}
			if len(d.Signatures) >= store.MaxDepositSignatures {
				return fmt.Errorf("%d transfers: %w", len(d.Signatures), store.ErrLimit)
			}
			if applied, err = grantOnce(tx, c.Entry()); err != nil {
				return err
			}
			d = d.Credit(c)
			return putJSON(tx.Bucket(bDeposits), k, d)
		})
	}
	if err != nil {
		return store.Deposit{}, false, fmt.Errorf("embedded: credit deposit %s of %s (%s): %w", c.DepositID, c.AccountID, c.Signature, err)
	}
	return d, applied, nil
}
