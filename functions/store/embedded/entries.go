package embedded

import (
	"bytes"
	"context"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// entryKey is an entry's key in bEntries: by account, then entry id, whose
// time comes first, so an account's entries sort together, oldest first.
func entryKey(accountID, id string) []byte {
	return append(prefixKey(accountID), id...)
}

// putEntry writes e in tx if it moves anything. Each move is made once, so
// its entry is new: finding it is a bug, not a retry.
func putEntry(tx *bolt.Tx, e store.Entry) error {
	if !e.Moves() {
		return nil
	}
	b := tx.Bucket(bEntries)
	k := entryKey(e.AccountID, e.ID)
	if b.Get(k) != nil {
		return fmt.Errorf("ledger entry %s of %s: %w", e.ID, e.AccountID, store.ErrExists)
	}
	return putJSON(b, k, e)
}

// Entries implements store.AccountLedger: a cursor walked backwards from
// the entry before (or from the account's last).
func (s *Store) Entries(ctx context.Context, accountID, before string, limit int) ([]store.Entry, error) {
	if err := store.CheckEntriesLimit(limit); err != nil {
		return nil, fmt.Errorf("embedded: entries of %s: %w", accountID, err)
	}
	out := []store.Entry{}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		from := entryKey(accountID, before)
		if before == "" {
			from = prefixEnd(accountID)
		}
		return eachBefore(tx.Bucket(bEntries), prefixKey(accountID), from, func(k, v []byte) (bool, error) {
			var e store.Entry
			if err := decode(k, v, &e); err != nil {
				return false, err
			}
			out = append(out, e)
			return len(out) < limit, nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: entries of %s: %w", accountID, err)
	}
	return out, nil
}

// prefixEnd is past every composite key that starts with s: s with the
// separator one higher.
func prefixEnd(s string) []byte { return append([]byte(s), sep+1) }

// eachBefore calls fn with b's keys that start with prefix and sort before
// from (from itself left out), last first, until fn returns false.
func eachBefore(b *bolt.Bucket, prefix, from []byte, fn func(k, v []byte) (more bool, err error)) error {
	c := b.Cursor()
	k, v := c.Seek(from)
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
		if more, err := fn(k, v); err != nil || !more {
			return err
		}
	}
	return nil
}
