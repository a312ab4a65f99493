package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// CreateAccount implements store.Store.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	if a.ID == "" {
		return errors.New("embedded: create account: empty id")
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bAccounts)
		if b.Get([]byte(a.ID)) != nil {
			return store.ErrExists
		}
		return putJSON(b, []byte(a.ID), a)
	})
	if err != nil {
		return fmt.Errorf("embedded: create account %s: %w", a.ID, err)
	}
	return nil
}

// GetAccount implements store.Store.
func (s *Store) GetAccount(ctx context.Context, id string) (store.Account, error) {
	var a store.Account
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := getJSON(tx.Bucket(bAccounts), []byte(id), &a)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("embedded: get account %s: %w", id, err)
	}
	return a, nil
}

// paidToKey is an account's entry under its payout wallet.
func paidToKey(wallet, account string) []byte { return []byte(wallet + "|" + account) }

// SetWallet implements store.Store.
func (s *Store) SetWallet(ctx context.Context, accountID, wallet string) (store.Account, error) {
	var a store.Account
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var old string
		err := changeAccount(tx, accountID, func(acct *store.Account) error {
			old, acct.Wallet = acct.Wallet, wallet
			a = *acct
			return nil
		})
		if err != nil {
			return err
		}
		b := tx.Bucket(bPaidTo)
		if old != "" {
			if err := b.Delete(paidToKey(old, accountID)); err != nil {
				return err
			}
		}
		return b.Put(paidToKey(wallet, accountID), nil)
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("embedded: set wallet of %s: %w", accountID, err)
	}
	return a, nil
}

// AccountsPaidTo implements store.Store: the account whose id is the wallet
// (a sign-in's, paid to itself unless it proved another) and those that
// proved it.
func (s *Store) AccountsPaidTo(ctx context.Context, wallet string) ([]store.Account, error) {
	var out []store.Account
	err := s.view(ctx, func(tx *bolt.Tx) error {
		accounts := tx.Bucket(bAccounts)
		ids := []string{wallet}
		p := []byte(wallet + "|")
		c := tx.Bucket(bPaidTo).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			ids = append(ids, string(k[len(p):]))
		}
		slices.Sort(ids)
		for _, id := range slices.Compact(ids) {
			var a store.Account
			ok, err := getJSON(accounts, []byte(id), &a)
			if err != nil {
				return err
			}
			if ok && a.Wallet == wallet {
				out = append(out, a)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: accounts paid to %s: %w", wallet, err)
	}
	return out, nil
}

// SetStakeBoost implements store.Store.
func (s *Store) SetStakeBoost(ctx context.Context, accountID string, until time.Time) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return changeAccount(tx, accountID, func(a *store.Account) error {
			a.StakeBoostUntil = until.UTC()
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("embedded: set stake boost of %s: %w", accountID, err)
	}
	return nil
}

// changeAccount applies change to an account in tx; ErrNotFound if there
// is none. An error from change leaves the account as it was.
func changeAccount(tx *bolt.Tx, id string, change func(*store.Account) error) error {
	accounts := tx.Bucket(bAccounts)
	var a store.Account
	if ok, err := getJSON(accounts, []byte(id), &a); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("account %s: %w", id, store.ErrNotFound)
	}
	if err := change(&a); err != nil {
		return err
	}
	return putJSON(accounts, []byte(id), a)
}

// grant is what an idempotency key records: enough to audit the grant.
type grant struct {
	AccountID string `json:"account_id"`
	Credits   int64  `json:"credits"`
	Deposit   bool   `json:"deposit"`
}

// Grant implements store.Store. Idempotency keys are kept forever: a
// deposit's transaction signature must never be credited twice, however
// late the retry.
func (s *Store) Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error) {
	if idemKey == "" {
		return false, fmt.Errorf("embedded: grant to %s: empty idempotency key", accountID)
	}
	if credits < 0 {
		return false, fmt.Errorf("embedded: grant to %s: negative credits %d", accountID, credits)
	}
	applied := false
	err := s.update(ctx, func(tx *bolt.Tx) (err error) {
		applied, err = grantOnce(tx, store.GrantEntry(accountID, credits, idemKey, deposit, s.now()))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("embedded: grant %d to %s (%s): %w", credits, accountID, idemKey, err)
	}
	return applied, nil
}

// granted reports whether an idempotency key of Grant was used.
func granted(tx *bolt.Tx, idemKey string) bool { return tx.Bucket(bGrants).Get([]byte(idemKey)) != nil }

// grantOnce applies the grant (or deposit) whose entry is e, unless its
// idempotency key (e.Ref) was used: the account's balance (and
// TotalDeposited), the entry and the key's record. applied is false when
// the key was used; nothing changes then.
func grantOnce(tx *bolt.Tx, e store.Entry) (applied bool, err error) {
	if granted(tx, e.Ref) {
		return false, nil
	}
	deposit := e.Kind == store.EntryDeposit
	err = changeAccount(tx, e.AccountID, func(a *store.Account) error {
		a.Credits += e.Credits
		if deposit {
			a.TotalDeposited += e.Credits
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	if err := putEntry(tx, e); err != nil {
		return false, err
	}
	m := store.Money{Granted: e.Credits}
	if deposit {
		m = store.Money{Deposited: e.Credits}
	}
	if err := addMoney(tx, m); err != nil {
		return false, err
	}
	return true, putJSON(tx.Bucket(bGrants), []byte(e.Ref), grant{AccountID: e.AccountID, Credits: e.Credits, Deposit: deposit})
}

// secretKind is one namespace of secrets: API keys or worker tokens.
type secretKind struct {
	name      string
	bucket    []byte
	byAccount []byte
	// workers says revoking finds the live worker connections.
	workers bool
}

var (
	apiKeys      = secretKind{name: "api key", bucket: bAPIKeys, byAccount: bAPIKeysByAccount}
	workerTokens = secretKind{name: "worker token", bucket: bTokens, byAccount: bTokensByAccount, workers: true}
)

// PutAPIKey implements store.Store.
func (s *Store) PutAPIKey(ctx context.Context, sec store.Secret) error {
	return s.putSecret(ctx, apiKeys, sec)
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, hash string) (store.Secret, error) {
	return s.getSecret(ctx, apiKeys, hash)
}

// ListAPIKeys implements store.Store.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]store.Secret, error) {
	return s.listSecrets(ctx, apiKeys, accountID)
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, accountID, id string, at time.Time) error {
	_, err := s.revokeSecret(ctx, apiKeys, accountID, id, at)
	return err
}

// UpdateAPIKey implements store.Store.
func (s *Store) UpdateAPIKey(ctx context.Context, accountID, id string, p store.KeyPatch) (store.Secret, error) {
	if err := p.Check(); err != nil {
		return store.Secret{}, fmt.Errorf("embedded: update api key %s of %s: %w", id, accountID, err)
	}
	return s.updateSecret(ctx, apiKeys, accountID, id, p.Apply)
}

// RenameWorkerToken implements store.Store.
func (s *Store) RenameWorkerToken(ctx context.Context, accountID, id, name string) (store.Secret, error) {
	return s.updateSecret(ctx, workerTokens, accountID, id, func(sec *store.Secret) { sec.Name = name })
}

// PutWorkerToken implements store.Store.
func (s *Store) PutWorkerToken(ctx context.Context, sec store.Secret) error {
	return s.putSecret(ctx, workerTokens, sec)
}

// GetWorkerToken implements store.Store.
func (s *Store) GetWorkerToken(ctx context.Context, hash string) (store.Secret, error) {
	return s.getSecret(ctx, workerTokens, hash)
}

// ListWorkerTokens implements store.Store.
func (s *Store) ListWorkerTokens(ctx context.Context, accountID string) ([]store.Secret, error) {
	return s.listSecrets(ctx, workerTokens, accountID)
}

// RevokeWorkerToken implements store.Store. It returns the live
// connections on the token even when the token was already revoked, so a
// retried revoke still finds workers that a lost first reply left behind.
func (s *Store) RevokeWorkerToken(ctx context.Context, accountID, id string, at time.Time) ([]string, error) {
	return s.revokeSecret(ctx, workerTokens, accountID, id, at)
}

func (s *Store) putSecret(ctx context.Context, kind secretKind, sec store.Secret) error {
	if sec.Hash == "" || sec.AccountID == "" {
		return fmt.Errorf("embedded: put %s: empty hash or account", kind.name)
	}
	sec, err := sec.Fresh(!kind.workers)
	if err != nil {
		return fmt.Errorf("embedded: put %s %s for %s: %w", kind.name, sec.ID, sec.AccountID, err)
	}
	err = s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(kind.bucket)
		if b.Get([]byte(sec.Hash)) != nil {
			return store.ErrExists
		}
		if sec.Active() {
			mine, err := accountSecrets(tx, kind, sec.AccountID)
			if err != nil {
				return err
			}
			active := 0
			for _, m := range mine {
				if m.Active() {
					active++
				}
			}
			if active >= store.MaxActiveKeys {
				return fmt.Errorf("%d active: %w", active, store.ErrLimit)
			}
		}
		if err := putJSON(b, []byte(sec.Hash), sec); err != nil {
			return err
		}
		return tx.Bucket(kind.byAccount).Put(secretIndexKey(sec), nil)
	})
	if err != nil {
		return fmt.Errorf("embedded: put %s %s for %s: %w", kind.name, sec.ID, sec.AccountID, err)
	}
	return nil
}

func (s *Store) getSecret(ctx context.Context, kind secretKind, hash string) (store.Secret, error) {
	var sec store.Secret
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := getJSON(tx.Bucket(kind.bucket), []byte(hash), &sec)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Secret{}, fmt.Errorf("embedded: get %s: %w", kind.name, err)
	}
	return sec, nil
}

func (s *Store) listSecrets(ctx context.Context, kind secretKind, accountID string) ([]store.Secret, error) {
	var out []store.Secret
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = accountSecrets(tx, kind, accountID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: list %ss of %s: %w", kind.name, accountID, err)
	}
	return out, nil
}

// accountSecrets returns an account's secrets, oldest first (the index
// orders them by CreatedAt, then hash).
func accountSecrets(tx *bolt.Tx, kind secretKind, accountID string) ([]store.Secret, error) {
	var out []store.Secret
	prefix := prefixKey(accountID)
	b := tx.Bucket(kind.bucket)
	c := tx.Bucket(kind.byAccount).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		hash := k[len(prefix)+8:]
		var sec store.Secret
		if ok, err := getJSON(b, hash, &sec); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("index entry for missing %s %x", kind.name, hash)
		}
		out = append(out, sec)
	}
	return out, nil
}

// updateSecret applies change to the account's secrets with public id
// (two could share one, as ids are hash prefixes) and returns the first,
// oldest, as stored.
func (s *Store) updateSecret(ctx context.Context, kind secretKind, accountID, id string, change func(*store.Secret)) (store.Secret, error) {
	var out store.Secret
	err := s.update(ctx, func(tx *bolt.Tx) error {
		mine, err := accountSecrets(tx, kind, accountID)
		if err != nil {
			return err
		}
		found := false
		for _, sec := range mine {
			if sec.ID != id {
				continue
			}
			change(&sec)
			if err := putJSON(tx.Bucket(kind.bucket), []byte(sec.Hash), sec); err != nil {
				return err
			}
			if !found {
				out, found = sec, true
			}
		}
		if !found {
			return store.ErrNotFound
		}
		return nil
	})
	if err != nil {
		return store.Secret{}, fmt.Errorf("embedded: update %s %s of %s: %w", kind.name, id, accountID, err)
	}
	return out, nil
}

// revokeSecret revokes the account's secrets with public id and returns the
// connections of live workers on them. Ids are hash prefixes, so two of one
// account's secrets could share one; both are revoked, which errs on the
// safe side.
func (s *Store) revokeSecret(ctx context.Context, kind secretKind, accountID, id string, at time.Time) ([]string, error) {
	if at.IsZero() {
		// A zero RevokedAt means active: revoking at the zero time would
		// silently revoke nothing.
		return nil, fmt.Errorf("embedded: revoke %s %s: zero time", kind.name, id)
	}
	var conns []string
	err := s.update(ctx, func(tx *bolt.Tx) error {
		mine, err := accountSecrets(tx, kind, accountID)
		if err != nil {
			return err
		}
		hashes := map[string]bool{}
		for _, sec := range mine {
			if sec.ID != id {
				continue
			}
			hashes[sec.Hash] = true
			if !sec.Active() {
				continue // revoking twice keeps the first time
			}
			sec.RevokedAt = at
			if err := putJSON(tx.Bucket(kind.bucket), []byte(sec.Hash), sec); err != nil {
				return err
			}
		}
		if len(hashes) == 0 {
			return store.ErrNotFound
		}
		if !kind.workers {
			return nil
		}
		for _, h := range slices.Sorted(maps.Keys(hashes)) {
			conns = append(conns, tokenConns(tx, h)...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: revoke %s %s of %s: %w", kind.name, id, accountID, err)
	}
	return conns, nil
}

// UseNonce implements store.Store, judging expiry by the store's clock.
// Each call also deletes a bounded batch of expired nonces, so the table
// does not grow with every sign-in ever made.
func (s *Store) UseNonce(ctx context.Context, nonce string, expires time.Time) error {
	if nonce == "" {
		return errors.New("embedded: use nonce: empty nonce")
	}
	now := s.now()
	err := s.update(ctx, func(tx *bolt.Tx) error {
		nonces := tx.Bucket(bNonces)
		expiry := tx.Bucket(bNonceExpiry)
		var old time.Time
		if ok, err := getJSON(nonces, []byte(nonce), &old); err != nil {
			return err
		} else if ok {
			if now.Before(old) {
				return store.ErrExists
			}
			if err := expiry.Delete(append(timeKey(old), nonce...)); err != nil {
				return err
			}
		}
		if err := putJSON(nonces, []byte(nonce), expires); err != nil {
			return err
		}
		if err := expiry.Put(append(timeKey(expires), nonce...), nil); err != nil {
			return err
		}
		swept, err := deleteKeysBefore(expiry, timeKey(now), nonceSweepBatch)
		if err != nil {
			return err
		}
		for _, k := range swept {
			if err := nonces.Delete(k[8:]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: use nonce: %w", err)
	}
	return nil
}
