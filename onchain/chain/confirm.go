package chain

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gagliardetto/solana-go"
)

// Confirm waits until sig's outcome is known, or ConfirmTimeout passes
// (or ctx ends): then it returns Unknown and no error.
//
// A Confirm alone looks sig up at once. While outcomes are unknown, the
// Confirm calls waiting on one Chain share a poller: each Poll it asks for
// every waiting signature together (LookupAll), so a window of
// transactions in flight costs one status call per poll, not one each.
func (c *Chain) Confirm(ctx context.Context, sig solana.Signature, lastValid uint64) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.ConfirmTimeout)
	defer cancel()
	w := &waiter{sig: sig, lastValid: lastValid, done: make(chan Outcome, 1)}
	if alone := c.watch.add(w); alone {
		// Nobody is polling: look it up now (a transaction sent a while
		// ago is usually final already), then poll for it if need be.
		o, err := c.Lookup(ctx, sig, lastValid)
		if err != nil && ctx.Err() == nil {
			c.log().Warn("chain: status lookup failed, retrying", "signature", sig.String(), "err", err)
		}
		if err == nil && o != Unknown {
			c.watch.remove(w)
			if !c.watch.stopIfIdle() {
				// Others joined meanwhile, counting on this call's
				// poller.
				go c.poll()
			}
			return o, nil
		}
		go c.poll()
	}
	defer c.watch.remove(w)
	select {
	case o := <-w.done:
		return o, nil
	case <-ctx.Done():
		return Unknown, nil
	}
}

func (c *Chain) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// waiter is one Confirm call waiting for its signature's outcome.
type waiter struct {
	sig       solana.Signature
	lastValid uint64
	// done receives the outcome once it is known (buffered: the poller
	// never blocks on a waiter that left).
	done chan Outcome
}

// watcher is the set of waiting Confirm calls and whether a poller runs
// for them. Its zero value is ready.
type watcher struct {
	mu      sync.Mutex
	waiting map[*waiter]struct{}
	// polling is true from the moment a Confirm takes on starting the
	// poller until the poller finds nobody waiting and stops.
	polling bool
}

// add registers w; alone is true when no poller runs: polling is then
// marked on the caller's behalf, and the caller must start the poller, or
// stopIfIdle and start it only if others wait.
func (wt *watcher) add(w *waiter) (alone bool) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if wt.waiting == nil {
		wt.waiting = map[*waiter]struct{}{}
	}
	wt.waiting[w] = struct{}{}
	alone = !wt.polling
	wt.polling = true
	return alone
}

func (wt *watcher) remove(w *waiter) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	delete(wt.waiting, w)
}

// stopIfIdle marks polling stopped when nobody waits, and says whether it
// did. A Confirm that arrives after it starts a poller of its own.
func (wt *watcher) stopIfIdle() bool {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if len(wt.waiting) > 0 {
		return false
	}
	wt.polling = false
	return true
}

// pending lists the waiters.
func (wt *watcher) pending() []*waiter {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	out := make([]*waiter, 0, len(wt.waiting))
	for w := range wt.waiting {
		out = append(out, w)
	}
	return out
}

// resolve hands o to w, if it still waits.
func (wt *watcher) resolve(w *waiter, o Outcome) {
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if _, ok := wt.waiting[w]; ok {
		delete(wt.waiting, w)
		w.done <- o
	}
}

// poll looks up every waiting signature each Poll, until nobody waits.
// Each waiter has its own deadline and leaves on its own, so the poller
// outlives the last of them by at most one lookup and one Poll. Its
// lookups belong to no one caller, so they run under a context of their
// own, bounded like a confirmation.
func (c *Chain) poll() {
	for {
		time.Sleep(c.Poll)
		if c.watch.stopIfIdle() {
			return
		}
		ws := c.watch.pending()
		sigs := make([]solana.Signature, len(ws))
		lastValid := make([]uint64, len(ws))
		for i, w := range ws {
			sigs[i], lastValid[i] = w.sig, w.lastValid
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.ConfirmTimeout)
		out, err := c.LookupAll(ctx, sigs, lastValid)
		cancel()
		if err != nil {
			c.log().Warn("chain: status lookup failed, retrying", "signatures", len(sigs), "err", err)
			continue
		}
		for i, o := range out {
			if o != Unknown {
				c.watch.resolve(ws[i], o)
			}
		}
		if c.watch.stopIfIdle() {
			return
		}
	}
}
