package keeper_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// payees are n fresh workers owed at least the minimum payout, each a
// different amount.
func payees(t testing.TB, n int) []keeper.Share {
	out := make([]keeper.Share, n)
	for i := range out {
		out[i] = keeper.Share{Owner: svmtest.NewKey(t).PublicKey(), Amount: keeper.MinPayout + uint64(i)}
	}
	return out
}

// soloKeeper is the world's keeper with every transfer in a transaction of
// its own (many transactions from a few transfers) and the given window.
func (w *world) soloKeeper(c *crashPoint, window int) *keeper.Keeper {
	k := w.keeper(c)
	build := k.Build
	k.Exec.Build = func(ctx context.Context, t store.Transfer) (onchain.Group, error) {
		g, err := build(ctx, t)
		g.Solo = true
		return g, err
	}
	k.Exec.Window = window
	return k
}

// checkPaid: each payee holds exactly what it is owed, and each transfer of
// the run went out in attempts transactions.
func (w *world) checkPaid(t *testing.T, run string, owed []keeper.Share, attempts int) {
	t.Helper()
	for _, s := range owed {
		if got := w.e.TokenBalance(t, w.cfg.USDCATA(s.Owner)); got != s.Amount {
			t.Errorf("payee %s holds %d, want %d", s.Owner, got, s.Amount)
		}
	}
	ts, err := w.ledger.RunTransfers(context.Background(), "payouts/"+run)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != len(owed) {
		t.Fatalf("run has %d transfers, want %d", len(ts), len(owed))
	}
	for _, tr := range ts {
		if tr.State != store.TransferConfirmed || tr.Attempts != attempts {
			t.Errorf("transfer %s is %s after %d attempts; want confirmed after %d", tr.Key, tr.State, tr.Attempts, attempts)
		}
	}
}

// watchedChain observes the executor's chain: how many transactions were
// sent before how many confirmations returned.
type watchedChain struct {
	keeper.Chain
	mu        sync.Mutex
	sent      int
	confirmed int
	// maxInFlight is the most sends not yet matched by a returned
	// confirmation, seen at a send.
	maxInFlight int
	// sentN is closed at the notify-th send.
	notify int
	sentN  chan struct{}
}

func newWatchedChain(c keeper.Chain, notify int) *watchedChain {
	return &watchedChain{Chain: c, notify: notify, sentN: make(chan struct{})}
}

func (c *watchedChain) Send(ctx context.Context, tx *solana.Transaction) (solana.Signature, error) {
	sig, err := c.Chain.Send(ctx, tx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent++
	c.maxInFlight = max(c.maxInFlight, c.sent-c.confirmed)
	if c.sent == c.notify {
		close(c.sentN)
	}
	return sig, err
}

func (c *watchedChain) Confirm(ctx context.Context, sig solana.Signature, lastValid uint64) (chain.Outcome, error) {
	out, err := c.Chain.Confirm(ctx, sig, lastValid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.confirmed++
	return out, err
}

func (c *watchedChain) counts() (sent, confirmed, maxInFlight int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.confirmed, c.maxInFlight
}

// waitFor waits for ch to close while the payouts run, failing the test
// if they end first.
func waitFor(t *testing.T, ch <-chan struct{}, done <-chan error, what string) {
	t.Helper()
	select {
	case <-ch:
	case err := <-done:
		t.Fatalf("the run ended (%v) before %s", err, what)
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
	}
}

// TestWindowKeepsTransactionsInFlight: with finality held back, the
// executor sends a full window of transactions before any is resolved, and
// never more; once they finalize it sends the rest, each once.
func TestWindowKeepsTransactionsInFlight(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	const window, n = 4, 10
	owed := payees(t, n)
	k := w.soloKeeper(nil, window)
	watch := newWatchedChain(k.Exec.Chain, window)
	k.Exec.Chain = watch
	before := e.TransactionCount(t)

	e.HoldFinality(t, true)
	type outcome struct {
		res keeper.Result
		err error
	}
	result := make(chan outcome, 1)
	done := make(chan error, 1)
	go func() {
		_, res, err := k.Payouts(ctx, "window", owed, true)
		result <- outcome{res, err}
		done <- err
	}()
	waitFor(t, watch.sentN, done, fmt.Sprintf("%d transactions were sent", window))
	if sent, confirmed, _ := watch.counts(); confirmed != 0 || sent != window {
		t.Fatalf("%d sent and %d confirmed while finality was held; want %d sent, none confirmed", sent, confirmed, window)
	}
	e.HoldFinality(t, false)
	e.Finalize(t)
	r := <-result
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, _, most := watch.counts(); most != window {
		t.Fatalf("at most %d transactions were in flight, want the window, %d", most, window)
	}
	if r.res.Transactions != n || r.res.Confirmed != n || e.TransactionCount(t)-before != n {
		t.Fatalf("result %+v and %d transactions landed; want %d transactions, all confirmed", r.res, e.TransactionCount(t)-before, n)
	}
	w.checkPaid(t, "window", owed, 1)
}

// TestOutOfTimeResumes: a deadline that leaves time for part of a run
// stops it with ErrOutOfTime, nothing left in flight or sent twice; a
// second Execute, with time, pays the rest, and every payee is paid once.
func TestOutOfTimeResumes(t *testing.T) {
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	const n = 12
	owed := payees(t, n)
	// Two in flight at a time, each finalized 400 ms after it lands: the
	// run takes at least 6 × 400 ms, and sends stop 1.5 s in.
	const finality, reserve, sending = 400 * time.Millisecond, 2 * time.Second, 1500 * time.Millisecond
	e.SetFinality(t, finality)
	before := e.TransactionCount(t)
	k := w.soloKeeper(nil, 2)
	k.Exec.Reserve = reserve
	ctx, cancel := context.WithTimeout(context.Background(), reserve+sending)
	defer cancel()
	_, first, err := k.Payouts(ctx, "out-of-time", owed, true)
	if !errors.Is(err, keeper.ErrOutOfTime) {
		t.Fatalf("err = %v, want ErrOutOfTime", err)
	}
	ts, err := w.ledger.RunTransfers(context.Background(), "payouts/out-of-time")
	if err != nil {
		t.Fatal(err)
	}
	states := map[store.TransferState]int{}
	for _, tr := range ts {
		states[tr.State]++
		want := uint64(0)
		if tr.State == store.TransferConfirmed {
			want = uint64(tr.Amount)
		}
		recipient := solana.MustPublicKeyFromBase58(tr.Recipient)
		if got := e.TokenBalance(t, w.cfg.USDCATA(recipient)); got != want {
			t.Errorf("%s transfer's payee holds %d, want %d", tr.State, got, want)
		}
	}
	paid := states[store.TransferConfirmed]
	if paid == 0 || paid == n || states[store.TransferPlanned] != n-paid {
		t.Fatalf("after running out of time: %v; want some confirmed, the rest planned, none in flight", states)
	}
	if first.Transactions != paid || first.Confirmed != paid || e.TransactionCount(t)-before != paid {
		t.Fatalf("first run %+v, %d landed; want %d transactions, each confirmed", first, e.TransactionCount(t)-before, paid)
	}
	t.Logf("out of time after %d of %d transactions", paid, n)

	_, second, err := w.soloKeeper(nil, 2).Payouts(context.Background(), "out-of-time", owed, true)
	if err != nil {
		t.Fatal(err)
	}
	if second.Transactions != n-paid || second.Confirmed != n || e.TransactionCount(t)-before != n {
		t.Fatalf("second run %+v, %d landed in all; want the %d left sent, all %d confirmed", second, e.TransactionCount(t)-before, n-paid, n)
	}
	w.checkPaid(t, "out-of-time", owed, 1)
}

// TestExpiredInFlightIsResent: a transaction dropped on its way never
// lands; once its blockhash expires the executor re-signs and sends it,
// while others stay in flight, and it is paid once.
func TestExpiredInFlightIsResent(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	const n = 3
	owed := payees(t, n)
	k := w.soloKeeper(nil, n)
	// Blocks pass once all are sent: a send signed before and sent after
	// would be refused for its blockhash.
	watch := newWatchedChain(k.Exec.Chain, n)
	k.Exec.Chain = watch
	e.DropSends(t, 1)
	done := make(chan error, 1)
	go func() {
		_, _, err := k.Payouts(ctx, "expired", owed, true)
		done <- err
	}()
	waitFor(t, watch.sentN, done, "every send")
	e.AdvanceBlocks(t, 151)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ts, err := w.ledger.RunTransfers(ctx, "payouts/expired")
	if err != nil {
		t.Fatal(err)
	}
	attempts := 0
	for _, tr := range ts {
		attempts += tr.Attempts
		if tr.State != store.TransferConfirmed {
			t.Errorf("transfer %s is %s", tr.Key, tr.State)
		}
	}
	if attempts != n+1 {
		t.Fatalf("%d attempts, want %d: the dropped transfer's resend and one each", attempts, n+1)
	}
	for _, s := range owed {
		if got := e.TokenBalance(t, w.cfg.USDCATA(s.Owner)); got != s.Amount {
			t.Errorf("payee %s holds %d, want %d", s.Owner, got, s.Amount)
		}
	}
}

// TestWindowCrashAtEveryStep kills a run of solo payouts, with three in
// flight at a time, at every ledger write and send, before and after it,
// and re-runs it: every payee is paid exactly once.
func TestWindowCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	const n, window = 5, 3
	count := &crashPoint{at: -1}
	owed := payees(t, n)
	if _, _, err := w.soloKeeper(count, window).Payouts(ctx, "count", owed, true); err != nil {
		t.Fatal(err)
	}
	w.checkPaid(t, "count", owed, 1)
	steps := count.n
	t.Logf("%d solo payouts take %d ledger writes and sends", n, steps)
	for at := 1; at <= steps; at++ {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("step%d/after=%v", at, after), func(t *testing.T) {
				run := fmt.Sprintf("crash-%d-%v", at, after)
				owed := payees(t, n)
				err := killed(func() error {
					_, _, err := w.soloKeeper(&crashPoint{at: at, after: after}, window).Payouts(ctx, run, owed, true)
					return err
				})
				if !errors.Is(err, errCrash) {
					t.Fatalf("crash at step %d did not surface: %v", at, err)
				}
				e.AdvanceBlocks(t, 151)
				if _, _, err := w.soloKeeper(nil, window).Payouts(ctx, run, owed, true); err != nil {
					t.Fatalf("re-run: %v", err)
				}
				for _, s := range owed {
					if got := e.TokenBalance(t, w.cfg.USDCATA(s.Owner)); got != s.Amount {
						t.Errorf("payee %s holds %d, want %d", s.Owner, got, s.Amount)
					}
				}
			})
		}
	}
}
