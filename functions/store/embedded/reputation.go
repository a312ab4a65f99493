package embedded

import (
	"bytes"
	"context"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

// tokenStanding is a worker token's record: the strikes of all its
// identities together and the standing they give.
type tokenStanding struct {
	Standing store.Standing `json:"standing"`
	Strikes  int64          `json:"strikes"`
}

// verdict is what bVerdicts keeps of an applied verdict: enough to audit it.
type verdict struct {
	AccountID string            `json:"account_id"`
	Kind      store.VerdictKind `json:"kind"`
	Strikes   int64             `json:"strikes,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	At        time.Time         `json:"at"`
}

// reputationKey is an identity's key in bReputations: by account, then
// pubkey.
func reputationKey(accountID, pubkey string) []byte {
	return append(prefixKey(accountID), pubkey...)
}

// loadReputation loads an identity's reputation; ok is false if it has none.
func loadReputation(tx *bolt.Tx, accountID, pubkey string) (r store.Reputation, ok bool, err error) {
	ok, err = getJSON(tx.Bucket(bReputations), reputationKey(accountID, pubkey), &r)
	return r, ok, err
}

// loadReputationOrNew loads an identity's reputation, or returns a fresh one
// first seen at on tokenHash (active, no strikes) if it has none. A record
// that a completion made without them (a job assigned before reputations
// were kept) takes them too, as the DynamoDB store's if_not_exists does.
func loadReputationOrNew(tx *bolt.Tx, accountID, pubkey, tokenHash string, at time.Time) (store.Reputation, error) {
	r, ok, err := loadReputation(tx, accountID, pubkey)
	if err != nil {
		return r, err
	}
	if !ok {
		r = store.Reputation{Pubkey: pubkey, AccountID: accountID, Standing: store.StandingActive}
	}
	if r.FirstSeen.IsZero() {
		r.FirstSeen, r.LastSeen = at, at
	}
	if r.TokenHash == "" {
		r.TokenHash = tokenHash
	}
	return r, nil
}

func putReputation(tx *bolt.Tx, r store.Reputation) error {
	return putJSON(tx.Bucket(bReputations), reputationKey(r.AccountID, r.Pubkey), r)
}

// loadTokenStanding loads a worker token's record; a token never judged is
// active with no strikes.
func loadTokenStanding(tx *bolt.Tx, tokenHash string) (tokenStanding, error) {
	t := tokenStanding{Standing: store.StandingActive}
	if tokenHash == "" {
		return t, nil
	}
	_, err := getJSON(tx.Bucket(bTokenStandings), []byte(tokenHash), &t)
	return t, err
}

// connectStanding applies PutWorker's reputation rules to w in tx: ErrBanned
// if its identity or its token is banned; else w takes their standing and
// the identity's strikes, and the identity's reputation is created (first
// seen now) or told that it was seen again. A worker without a pubkey has
// no identity to keep a reputation of.
func connectStanding(tx *bolt.Tx, w *store.Worker) error {
	tok, err := loadTokenStanding(tx, w.TokenHash)
	if err != nil {
		return err
	}
	if tok.Standing == store.StandingBanned {
		return fmt.Errorf("worker token: %w", store.ErrBanned)
	}
	w.Standing, w.Strikes = store.Worse(store.StandingActive, tok.Standing), 0
	if w.Pubkey == "" {
		return nil
	}
	rep, err := loadReputationOrNew(tx, w.AccountID, w.Pubkey, w.TokenHash, w.ConnectedAt)
	if err != nil {
		return err
	}
	if rep.Standing == store.StandingBanned {
		return fmt.Errorf("worker identity %s: %w", w.Pubkey, store.ErrBanned)
	}
	w.Standing, w.Strikes = store.Worse(rep.Standing, tok.Standing), rep.Strikes
	rep.LastSeen, rep.TokenHash = w.ConnectedAt, w.TokenHash
	return putReputation(tx, rep)
}

// countJob counts a completed job in its worker identity's reputation: the
// job, its earning and the measured speed. A canary counts nowhere there
// (its verdict does), nor does a job without a worker pubkey.
func countJob(tx *bolt.Tx, job store.Job, c store.Completion) error {
	if job.Canary || job.WorkerPubkey == "" {
		return nil
	}
	rep, err := loadReputationOrNew(tx, job.WorkerAccount, job.WorkerPubkey, "", time.Time{})
	if err != nil {
		return err
	}
	if rep.Standing != store.StandingActive {
		return fmt.Errorf("worker identity %s is %s: %w", rep.Pubkey, rep.Standing, store.ErrNotActive)
	}
	rep.JobsCompleted++
	rep.EarnedCredits += c.Earning
	if c.MilliTokPerSec > 0 {
		rep.MilliTokPerSec = c.MilliTokPerSec
	}
	return putReputation(tx, rep)
}

// Judge implements store.Store in one transaction: the verdict's record
// (once per job and pubkey), the identity's and the token's reputations, a
// passed canary's earning and the live worker's standing.
func (s *Store) Judge(ctx context.Context, v store.Verdict) (store.Reputation, error) {
	fail := func(err error) (store.Reputation, error) {
		return store.Reputation{}, fmt.Errorf("embedded: judge job %s of %s: %w", v.JobID, v.Pubkey, err)
	}
	if err := v.Check(); err != nil {
		return fail(err)
	}
	var after store.Reputation
	err := s.update(ctx, func(tx *bolt.Tx) error {
		before, err := loadReputationOrNew(tx, v.AccountID, v.Pubkey, v.TokenHash, v.At)
		if err != nil {
			return err
		}
		verdicts := tx.Bucket(bVerdicts)
		vk := append(prefixKey(v.JobID), v.Pubkey...)
		if verdicts.Get(vk) != nil {
			after = before // a retry: the first call did everything
			return nil
		}
		after = before.Judged(v)
		tok, err := loadTokenStanding(tx, v.TokenHash)
		if err != nil {
			return err
		}
		if v.TokenHash != "" {
			tok.Standing, tok.Strikes = store.TokenJudged(tok.Standing, tok.Strikes, before, after)
			if err := putJSON(tx.Bucket(bTokenStandings), []byte(v.TokenHash), tok); err != nil {
				return err
			}
		}
		if v.Kind == store.VerdictCanaryPassed {
			v.Earning = after.EarnedCredits - before.EarnedCredits // none for a banned identity
			if err := creditEarning(tx, store.CanaryEarningEntry(v)); err != nil {
				return err
			}
		}
		w, ok, err := loadWorker(tx, v.Conn)
		if err != nil {
			return err
		}
		if ok && w.Pubkey == v.Pubkey && w.AccountID == v.AccountID {
			w.Standing, w.Strikes = store.Worse(after.Standing, tok.Standing), after.Strikes
			if err := saveWorker(tx, w.Conn, w); err != nil {
				return err
			}
		}
		if err := putReputation(tx, after); err != nil {
			return err
		}
		return putJSON(verdicts, vk, verdict{AccountID: v.AccountID, Kind: v.Kind, Strikes: v.Strikes, Reason: v.Reason, At: v.At})
	})
	if err != nil {
		return fail(err)
	}
	return after, nil
}

// GetReputation implements store.Store.
func (s *Store) GetReputation(ctx context.Context, accountID, pubkey string) (store.Reputation, error) {
	var r store.Reputation
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var ok bool
		var err error
		if r, ok, err = loadReputation(tx, accountID, pubkey); err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Reputation{}, fmt.Errorf("embedded: get reputation of %s on %s: %w", pubkey, accountID, err)
	}
	return r, nil
}

// Reputations implements store.Store: the bucket's key order is the order
// asked for.
func (s *Store) Reputations(ctx context.Context, accountID string) ([]store.Reputation, error) {
	var out []store.Reputation
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var prefix []byte
		if accountID != "" {
			prefix = prefixKey(accountID)
		}
		c := tx.Bucket(bReputations).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var r store.Reputation
			if err := decode(k, v, &r); err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: reputations of %q: %w", accountID, err)
	}
	return out, nil
}

// SetTrusted implements store.Store.
func (s *Store) SetTrusted(ctx context.Context, accountID, pubkey string, trusted bool) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		r, ok, err := loadReputation(tx, accountID, pubkey)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		r.Trusted = trusted
		return putReputation(tx, r)
	})
	if err != nil {
		return fmt.Errorf("embedded: set trusted %s on %s: %w", pubkey, accountID, err)
	}
	return nil
}
