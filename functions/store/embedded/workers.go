package embedded

import (
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

// PutWorker implements store.Store. An empty State is stored as idle, the
// state of a fresh connection.
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
		var tok store.Secret
		if ok, err := getJSON(tx.Bucket(bTokens), []byte(w.TokenHash), &tok); err != nil {
			return err
		} else if ok && !tok.Active() {
			return fmt.Errorf("worker token: %w", store.ErrRevoked)
		}
		return putJSON(b, []byte(w.Conn), w)
	})
	if err != nil {
		return fmt.Errorf("embedded: put worker %s: %w", w.Conn, err)
	}
	return nil
}

// RegisterWorker implements store.Store.
func (s *Store) RegisterWorker(ctx context.Context, conn string, models []string) (store.Worker, error) {
	w, err := s.changeWorker(ctx, conn, func(w *store.Worker) {
		w.Models = append([]string(nil), models...)
		w.Registered = true
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
		return putJSON(tx.Bucket(bWorkers), []byte(conn), w)
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
		return tx.Bucket(bWorkers).Delete([]byte(conn))
	})
	if err != nil {
		return store.Worker{}, fmt.Errorf("embedded: delete worker %s: %w", conn, err)
	}
	return w, nil
}

// IdleWorkers implements store.Store. It scans every worker: there are as
// many as live connections, and dispatch needs all eligible ones to weigh
// them.
func (s *Store) IdleWorkers(ctx context.Context, model string) ([]store.Worker, error) {
	out, err := s.workers(ctx, func(w store.Worker) bool {
		return w.Registered && !w.Draining && w.State == store.WorkerIdle && w.Serves(model)
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
