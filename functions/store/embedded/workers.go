package embedded

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/c0mpute/c0mpute/functions/store"
)

func loadWorker(tx *bolt.Tx, conn string) (store.Worker, bool, error) {
	var w store.Worker
	ok, err := getJSON(tx.Bucket(bWorkers), []byte(conn), &w)
	return w, ok, err
}

// tokenConnKey is a worker's entry under its token in bWorkersByToken.
func tokenConnKey(tokenHash, conn string) []byte {
	return append(prefixKey(tokenHash), conn...)
}

// tokenConns returns the connections of the live workers on a token.
func tokenConns(tx *bolt.Tx, tokenHash string) []string {
	var out []string
	prefix := prefixKey(tokenHash)
	c := tx.Bucket(bWorkersByToken).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		out = append(out, string(k[len(prefix):]))
	}
	return out
}

// revokedToken returns ErrRevoked if the worker token exists and is
// revoked. A token the store does not know (tests, a worker without one)
// is not revoked.
func revokedToken(tx *bolt.Tx, tokenHash string) error {
	if tokenHash == "" {
		return nil
	}
	var tok store.Secret
	if ok, err := getJSON(tx.Bucket(bTokens), []byte(tokenHash), &tok); err != nil {
		return err
	} else if ok && !tok.Active() {
		return fmt.Errorf("worker token %s: %w", tok.ID, store.ErrRevoked)
	}
	return nil
}

// PutWorker implements store.Store. An empty State is stored as idle, the
// state of a fresh connection. A worker without a TokenHash counts against
// no token's cap: the relay always sets one; tests may not. The standings
// are read and the identity's reputation written in the same transaction,
// so a ban that committed first is never missed.
func (s *Store) PutWorker(ctx context.Context, w store.Worker) error {
	if w.Conn == "" {
		return errors.New("embedded: put worker: empty connection id")
	}
	if w.State == "" {
		w.State = store.WorkerIdle
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bWorkers)
		if b.Get([]byte(w.Conn)) != nil {
			return store.ErrExists
		}
		// A token revoked since the caller checked it: the revoke
		// listed the token's workers before this one existed.
		if err := revokedToken(tx, w.TokenHash); err != nil {
			return err
		}
		if err := connectStanding(tx, &w); err != nil {
			return err
		}
		if w.TokenHash != "" {
			// Workers are deleted only by DeleteWorker and by Open,
			// which keep this index with them, so the count is exact.
			if n := len(tokenConns(tx, w.TokenHash)); n >= s.maxConns {
				return fmt.Errorf("%d of %d connections on the worker token: %w", n, s.maxConns, store.ErrLimit)
			}
			if err := tx.Bucket(bWorkersByToken).Put(tokenConnKey(w.TokenHash, w.Conn), nil); err != nil {
				return err
			}
		}
		if err := countWorker(tx, w, 1, s.now()); err != nil {
			return err
		}
		return saveWorker(tx, w.Conn, w)
	})
	if err != nil {
		return fmt.Errorf("embedded: put worker %s: %w", w.Conn, err)
	}
	return nil
}

// RegisterWorker implements store.Store. The token is checked in the same
// transaction as the registration, so a revoke that committed first is
// never missed.
func (s *Store) RegisterWorker(ctx context.Context, conn string, models []string, caps map[string]store.Caps) (store.Worker, error) {
	var w store.Worker
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		if w, err = requireWorker(tx, conn); err != nil {
			return err
		}
		if err := revokedToken(tx, w.TokenHash); err != nil {
			return err
		}
		// A registration replaces the models of one before it.
		if err := countRegistered(tx, w, -1, s.now()); err != nil {
			return err
		}
		w.Models = append([]string(nil), models...)
		w.Caps = store.RegisteredCaps(models, caps)
		w.Registered = true
		if err := countRegistered(tx, w, 1, s.now()); err != nil {
			return err
		}
		return saveWorker(tx, conn, w)
	})
	if err != nil {
		return store.Worker{}, fmt.Errorf("embedded: register worker %s: %w", conn, err)
	}
	return w, nil
}

// DrainWorker implements store.Store.
func (s *Store) DrainWorker(ctx context.Context, conn string) (store.Worker, error) {
	w, err := s.changeWorker(ctx, conn, func(w *store.Worker) { w.Draining = true })
	if err != nil {
		return store.Worker{}, fmt.Errorf("embedded: drain worker %s: %w", conn, err)
	}
	return w, nil
}

func (s *Store) changeWorker(ctx context.Context, conn string, change func(*store.Worker)) (store.Worker, error) {
	var w store.Worker
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		if w, err = requireWorker(tx, conn); err != nil {
			return err
		}
		change(&w)
		return saveWorker(tx, conn, w)
	})
	return w, err
}

// requireWorker loads a worker; ErrNotFound if there is none.
func requireWorker(tx *bolt.Tx, conn string) (store.Worker, error) {
	w, ok, err := loadWorker(tx, conn)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	return w, err
}

// GetWorker implements store.Store.
func (s *Store) GetWorker(ctx context.Context, conn string) (store.Worker, error) {
	var w store.Worker
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		w, err = requireWorker(tx, conn)
		return err
	})
	if err != nil {
		return store.Worker{}, fmt.Errorf("embedded: get worker %s: %w", conn, err)
	}
	return w, nil
}

// DeleteWorker implements store.Store. The worker's job, if any, is left as
// it is: the caller decides between Requeue and Fail.
func (s *Store) DeleteWorker(ctx context.Context, conn string) (store.Worker, error) {
	var w store.Worker
	err := s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		if w, err = requireWorker(tx, conn); err != nil {
			return err
		}
		if w.TokenHash != "" {
			if err := tx.Bucket(bWorkersByToken).Delete(tokenConnKey(w.TokenHash, conn)); err != nil {
				return err
			}
		}
		if err := countWorker(tx, w, -1, s.now()); err != nil {
			return err
		}
		if err := tx.Bucket(bIdleWorkers).Delete([]byte(conn)); err != nil {
			return err
		}
		return tx.Bucket(bWorkers).Delete([]byte(conn))
	})
	if err != nil {
		return store.Worker{}, fmt.Errorf("embedded: delete worker %s: %w", conn, err)
	}
	return w, nil
}

// idle reports whether IdleWorkers lists w (for the models it serves):
// registered, not draining, and without a job.
func idle(w store.Worker) bool {
	return w.Registered && !w.Draining && w.State == store.WorkerIdle
}

// saveWorker writes the record of the worker on connection conn, and keeps
// the bIdleWorkers index with it: every write of a worker record goes
// through here (DeleteWorker and Open drop both), so the index lists
// exactly the idle workers.
func saveWorker(tx *bolt.Tx, conn string, w store.Worker) error {
	ix := tx.Bucket(bIdleWorkers)
	var err error
	if idle(w) {
		err = ix.Put([]byte(conn), nil)
	} else {
		err = ix.Delete([]byte(conn))
	}
	if err != nil {
		return err
	}
	return putJSON(tx.Bucket(bWorkers), []byte(conn), w)
}

// IdleWorkers implements store.Store. It reads the idle workers through
// the bIdleWorkers index, so a claim decodes only the records of idle
// workers (dispatch weighs every eligible one), not those of every live
// connection: under load, when most workers are busy, the few idle ones.
func (s *Store) IdleWorkers(ctx context.Context, model string) ([]store.Worker, error) {
	var out []store.Worker
	err := s.view(ctx, func(tx *bolt.Tx) error {
		workers := tx.Bucket(bWorkers)
		return tx.Bucket(bIdleWorkers).ForEach(func(k, _ []byte) error {
			var w store.Worker
			ok, err := getJSON(workers, k, &w)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("idle index lists %s, which has no record", k)
			}
			if idle(w) && w.Serves(model) {
				out = append(out, w)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("embedded: idle workers for %s: %w", model, err)
	}
	return out, nil
}

// Workers implements store.Store.
func (s *Store) Workers(ctx context.Context) ([]store.Worker, error) {
	out, err := s.workers(ctx, func(store.Worker) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("embedded: workers: %w", err)
	}
	return out, nil
}

func (s *Store) workers(ctx context.Context, keep func(store.Worker) bool) ([]store.Worker, error) {
	var out []store.Worker
	err := s.view(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bWorkers).ForEach(func(k, v []byte) error {
			var w store.Worker
			if err := decode(k, v, &w); err != nil {
				return err
			}
			if keep(w) {
				out = append(out, w)
			}
			return nil
		})
	})
	return out, err
}

// PutListener implements store.Store. It overwrites: a listener record has
// no state to lose.
func (s *Store) PutListener(ctx context.Context, l store.Listener) error {
	if l.Conn == "" {
		return errors.New("embedded: put listener: empty connection id")
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		return putJSON(tx.Bucket(bListeners), []byte(l.Conn), l)
	})
	if err != nil {
		return fmt.Errorf("embedded: put listener %s: %w", l.Conn, err)
	}
	return nil
}

// GetListener implements store.Store.
func (s *Store) GetListener(ctx context.Context, conn string) (store.Listener, error) {
	var l store.Listener
	err := s.view(ctx, func(tx *bolt.Tx) error {
		ok, err := getJSON(tx.Bucket(bListeners), []byte(conn), &l)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Listener{}, fmt.Errorf("embedded: get listener %s: %w", conn, err)
	}
	return l, nil
}

// DeleteListener implements store.Store.
func (s *Store) DeleteListener(ctx context.Context, conn string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		b := tx.Bucket(bListeners)
		if b.Get([]byte(conn)) == nil {
			return store.ErrNotFound
		}
		return b.Delete([]byte(conn))
	})
	if err != nil {
		return fmt.Errorf("embedded: delete listener %s: %w", conn, err)
	}
	return nil
}
