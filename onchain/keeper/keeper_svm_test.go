package keeper_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

var errCrash = errors.New("crash injected")

// crashPoint kills the keeper at the nth mutating step (a ledger write or
// a send), before or after it takes effect: it panics, so nothing after
// that point runs, as if the process died there. killed recovers it.
type crashPoint struct {
	at    int
	after bool
	n     int
}

func (c *crashPoint) step(do func() error) error {
	c.n++
	if c.n == c.at && !c.after {
		panic(errCrash)
	}
	err := do()
	if c.n == c.at && c.after {
		panic(errCrash)
	}
	return err
}

// killed runs f and turns the injected crash into errCrash.
func killed(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r != errCrash {
				panic(r)
			}
			err = errCrash
		}
	}()
	return f()
}

type crashLedger struct {
	store.Ledger
	c *crashPoint
}

func (l crashLedger) StartRun(ctx context.Context, r store.KeeperRun) (out store.KeeperRun, created bool, err error) {
	err = l.c.step(func() error { out, created, err = l.Ledger.StartRun(ctx, r); return err })
	return
}
func (l crashLedger) ResetPlan(ctx context.Context, run string) error {
	return l.c.step(func() error { return l.Ledger.ResetPlan(ctx, run) })
}
func (l crashLedger) AddTransfers(ctx context.Context, run string, ts []store.Transfer, at time.Time) error {
	return l.c.step(func() error { return l.Ledger.AddTransfers(ctx, run, ts, at) })
}
func (l crashLedger) SealPlan(ctx context.Context, run string, n int, s string, at time.Time) error {
	return l.c.step(func() error { return l.Ledger.SealPlan(ctx, run, n, s, at) })
}
func (l crashLedger) MarkSent(ctx context.Context, keys []string, prev, sig string, lv uint64, at time.Time) error {
	return l.c.step(func() error { return l.Ledger.MarkSent(ctx, keys, prev, sig, lv, at) })
}
func (l crashLedger) Settle(ctx context.Context, keys []string, sig string, st store.TransferState, reason string, at time.Time) error {
	return l.c.step(func() error { return l.Ledger.Settle(ctx, keys, sig, st, reason, at) })
}
func (l crashLedger) FinishRun(ctx context.Context, run string, carries map[string]int64, at time.Time) error {
	return l.c.step(func() error { return l.Ledger.FinishRun(ctx, run, carries, at) })
}

type crashChain struct {
	*chain.Chain
	c *crashPoint
}

func (ch crashChain) Send(ctx context.Context, tx *solana.Transaction) (sig solana.Signature, err error) {
	err = ch.c.step(func() error { sig, err = ch.Chain.Send(ctx, tx); return err })
	return
}

// world is one day on the SVM: mints, a treasury, stakers, workers and a
// pool, under programs ids of its own so that worlds sharing a harness do
// not see each other's stake accounts.
type world struct {
	e        *svmtest.Env
	kp       solana.PrivateKey
	cfg      onchain.Config
	ledger   ledgerStore
	swap     *svmtest.FixedPriceSwap
	stakers  []solana.PublicKey
	compound []solana.PublicKey
	workers  []keeper.Share
	at       time.Time
	usdc0    uint64
	supply0  uint64
	// confirmTimeout overrides the keeper's confirmation timeout.
	confirmTimeout time.Duration
}

// The world's books: its customer deposited revenueCredits + unspent and
// spent revenueCredits on jobs that ended, so the day's split is revenue
// (996.5 USDC) and the unspent $5 stays in the treasury, which holds it
// all, the workers' $3.50 and 3 base units more (an odd remainder).
const (
	revenueCredits = 99_650
	revenueUSDC    = revenueCredits * 10_000
	unspentCredits = 500
	treasuryUSDC   = revenueUSDC + unspentCredits*10_000 + 3_500_000 + 3
)

func newWorld(t testing.TB, e *svmtest.Env, compounders bool, failSwap bool) *world {
	w := &world{e: e, at: time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)}
	w.cfg = e.Config
	w.cfg.StakingProgram = svmtest.NewKey(t).PublicKey()
	w.cfg.RewardsProgram = svmtest.NewKey(t).PublicKey()
	w.kp = svmtest.NewKey(t)
	e.Airdrop(t, w.kp.PublicKey(), 100_000_000_000)
	w.cfg.Treasury = w.kp.PublicKey()
	kp := w.kp.PublicKey()
	e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, kp, treasuryUSDC)
	w.usdc0 = e.TokenBalance(t, w.cfg.USDCATA(kp))
	w.swap = svmtest.NewFixedPriceSwap(t, e, kp, 10_000_000_000_000, 7, 2)
	if failSwap {
		// Only the compound swap fails; the buyback (half the split)
		// goes through.
		w.swap.FailUnless = revenueUSDC - revenueUSDC/2
	}
	day := int64(86400)
	for i, amt := range []uint64{1_000_000, 3_333_333, 7, 50_000_000_000} {
		o := svmtest.NewKey(t).PublicKey()
		auto := compounders && i%2 == 1
		acct := zerostaking.StakeAccount{Owner: o, Bump: 255, Autocompound: auto, Total: amt + 5,
			Deposits: []zerostaking.Deposit{{Amount: amt, Time: w.at.Unix() - day - int64(i)}, {Amount: 5, Time: w.at.Unix() - 10}}}
		b, err := acct.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		e.SetAccount(t, w.cfg.StakePDA(o), w.cfg.StakingProgram, append(zerostaking.Account_StakeAccount[:], b...))
		if auto {
			w.compound = append(w.compound, o)
		} else {
			w.stakers = append(w.stakers, o)
		}
	}
	for _, amt := range []uint64{2_500_000, 999_999, 1_000_000} {
		w.workers = append(w.workers, keeper.Share{Owner: svmtest.NewKey(t).PublicKey(), Amount: amt})
	}
	w.ledger = openLedger(t)
	w.customer(t, "customer", revenueCredits+unspentCredits, revenueCredits)
	w.supply0 = e.MintSupply(t, w.cfg.ZeroMint)
	return w
}

// ledgerStore is the store the keeper runs on: its ledger, and the
// accounts, keys and jobs whose money totals the split is computed from.
type ledgerStore = store.Store

// customer makes an account that deposits credits and spends spent of
// them on a job that ends unrefunded (its client left): the network's
// revenue grows by spent, the customer is owed the rest.
func (w *world) customer(t testing.TB, id string, credits, spent int64) {
	t.Helper()
	ctx := context.Background()
	if err := w.ledger.CreateAccount(ctx, store.Account{ID: id, CreatedAt: w.at}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ledger.Grant(ctx, id, credits, "deposit-"+id, true); err != nil {
		t.Fatal(err)
	}
	hash := "key-" + id
	if err := w.ledger.PutAPIKey(ctx, store.Secret{Hash: hash, ID: hash, AccountID: id, CreatedAt: w.at}); err != nil {
		t.Fatal(err)
	}
	job := store.Job{ID: "job-" + id, Model: "m", Price: spent, Listener: "l", Created: w.at.Add(-time.Hour)}
	if _, err := w.ledger.Admit(ctx, store.AdmitRequest{KeyHash: hash, Window: job.Created.Truncate(time.Minute), Limit: 10, Job: job}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ledger.Fail(ctx, job.ID, "client_gone", false, w.at.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// openLedger opens the store the keeper runs on: the embedded store, or
// with C0MPUTE_STORE=dynamodb a fresh table on DynamoDB Local (scripts/test
// runs these tests both ways).
func openLedger(t testing.TB) ledgerStore {
	t.Helper()
	if os.Getenv("C0MPUTE_STORE") == "dynamodb" {
		return dynamotest.Store(t)
	}
	l, err := embedded.Open(t.TempDir()+"/ledger.db", embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func (w *world) keeper(c *crashPoint) *keeper.Keeper {
	ch := chain.New(w.e.RPC)
	ch.Poll = 5 * time.Millisecond
	// Generous: a harness that answers late under -race must not look
	// like a lost transaction. No test waits for it to pass.
	ch.ConfirmTimeout = 20 * time.Second
	if w.confirmTimeout > 0 {
		ch.ConfirmTimeout = w.confirmTimeout
	}
	var l store.Ledger = w.ledger
	var xc keeper.Chain = ch
	if c != nil {
		l = crashLedger{w.ledger, c}
		xc = crashChain{ch, c}
	}
	k := &keeper.Keeper{Config: w.cfg, Ledger: l, Earnings: w.ledger, Stakes: w.e.RPC, Balances: ch, Swap: w.swap,
		Delivery: keeper.DeliverVaultTransfer, AccountsRPC: w.e.RPC}
	k.Exec = &keeper.Executor{Ledger: l, Chain: xc, Keeper: w.kp, Build: k.Build, Prepare: k.Prepare, PriorityFee: 1000, MaxResends: 2,
		Log: slog.New(slog.DiscardHandler)}
	return k
}

// day runs the payouts, then the rewards on the day's revenue.
func (w *world) day(k *keeper.Keeper) error {
	if _, _, err := k.Payouts(context.Background(), "2026-11-29", w.workers, true); err != nil {
		return err
	}
	_, err := k.Rewards(context.Background(), w.at, true)
	return err
}

// check verifies balances to the base unit against an independent
// computation of the plan.
func (w *world) check(t *testing.T) {
	t.Helper()
	e, c := w.e, w.cfg
	kp := w.kp.PublicKey()
	// What the plan must be, from the inputs alone.
	var paidOut uint64
	for _, s := range w.workers {
		want := uint64(0)
		if s.Amount >= keeper.MinPayout {
			want = s.Amount
		}
		if got := e.TokenBalance(t, c.USDCATA(s.Owner)); got != want {
			t.Errorf("worker %s USDC = %d, want %d", s.Owner, got, want)
		}
		paidOut += want
	}
	// The revenue is split, never the balance.
	split := uint64(revenueUSDC)
	pot := split / 2
	burnPot := split - pot
	var total uint64
	matured := map[solana.PublicKey]uint64{}
	share := func(o solana.PublicKey) uint64 {
		v := new(big.Int).SetUint64(pot)
		v.Mul(v, new(big.Int).SetUint64(matured[o]))
		return v.Quo(v, new(big.Int).SetUint64(total)).Uint64()
	}
	for _, o := range append(append([]solana.PublicKey{}, w.stakers...), w.compound...) {
		// The deposits were written by newWorld; the 5-unit one is not
		// mature yet.
		matured[o] = w.maturedOf(t, o)
		total += matured[o]
	}
	var rewardsPaid, compoundUSDC uint64
	for _, o := range w.stakers {
		want := share(o)
		if got := e.TokenBalance(t, c.RewardVault(o)); got != want {
			t.Errorf("staker %s reward vault = %d, want %d", o, got, want)
		}
		rewardsPaid += want
	}
	for _, o := range w.compound {
		compoundUSDC += share(o)
	}
	remainder := pot - rewardsPaid - compoundUSDC
	if carry, _ := w.ledger.Carry(context.Background(), keeper.CarryRewardUSDC); uint64(carry) != remainder {
		t.Errorf("carried reward remainder = %d, want %d", carry, remainder)
	}
	// Buyback: every ZERO the swap returned is burnt, and nothing else.
	zeroOut := burnPot * 7 / 2
	if got := e.MintSupply(t, c.ZeroMint); got != w.supply0-zeroOut {
		t.Errorf("ZERO supply = %d, want %d (burnt %d)", got, w.supply0-zeroOut, zeroOut)
	}
	spentOnCompound := uint64(0)
	if len(w.compound) > 0 && w.swap.FailUnless == 0 {
		spentOnCompound = compoundUSDC
		// One swap for all compounders; its ZERO split by their USDC
		// shares, floor each, the rest carried.
		zero := compoundUSDC * 7 / 2
		var staked uint64
		for _, o := range w.compound {
			v := new(big.Int).SetUint64(zero)
			v.Mul(v, new(big.Int).SetUint64(share(o))).Quo(v, new(big.Int).SetUint64(compoundUSDC))
			if got := e.TokenBalance(t, c.StakeVault(o)); got != v.Uint64() {
				t.Errorf("compounder %s stake vault = %d ZERO, want %d", o, got, v.Uint64())
			}
			if got := e.TokenBalance(t, c.RewardVault(o)); got != 0 {
				t.Errorf("compounder %s also got %d USDC", o, got)
			}
			staked += v.Uint64()
		}
		if carry, _ := w.ledger.Carry(context.Background(), keeper.CarryCompoundZero); uint64(carry) != zero-staked {
			t.Errorf("carried ZERO = %d, want %d", carry, zero-staked)
		}
		if got := e.TokenBalance(t, c.ZeroATA(kp)); got != zero-staked {
			t.Errorf("keeper holds %d ZERO, want the carried %d", got, zero-staked)
		}
	}
	if len(w.compound) > 0 && w.swap.FailUnless != 0 {
		// The swap failed: compounders got their USDC in their vaults.
		for _, o := range w.compound {
			want := share(o)
			if got := e.TokenBalance(t, c.RewardVault(o)); got != want {
				t.Errorf("compounder %s reward vault = %d, want %d after the swap failed", o, got, want)
			}
			rewardsPaid += want
		}
	}
	wantTreasury := w.usdc0 - rewardsPaid - paidOut - burnPot - spentOnCompound
	if got := e.TokenBalance(t, c.USDCATA(kp)); got != wantTreasury {
		t.Errorf("treasury USDC = %d, want %d", got, wantTreasury)
	}
	// What customers may still spend never left.
	if owed := uint64(unspentCredits*10_000) + remainder; wantTreasury < owed {
		t.Errorf("treasury USDC = %d, below the customers' %d and the carried %d", wantTreasury, unspentCredits*10_000, remainder)
	}
	if got := e.TokenBalance(t, c.USDCATA(w.swap.Pool)); got != burnPot+spentOnCompound {
		t.Errorf("pool received %d USDC, want %d", got, burnPot+spentOnCompound)
	}
}

// encodeWithAnchor rewrites every stake account of the world with the
// bytes @coral-xyz/anchor encodes from the IDL for the same values.
func (w *world) encodeWithAnchor(t *testing.T) {
	owners := append(append([]solana.PublicKey{}, w.stakers...), w.compound...)
	var cases []svmtest.Case
	for _, o := range owners {
		res, err := w.e.RPC.GetAccountInfo(context.Background(), w.cfg.StakePDA(o))
		if err != nil {
			t.Fatal(err)
		}
		a, err := zerostaking.ParseAccount_StakeAccount(res.Value.Data.GetBinary())
		if err != nil {
			t.Fatal(err)
		}
		deps := []any{}
		for _, d := range a.Deposits {
			deps = append(deps, map[string]any{"amount": fmt.Sprint(d.Amount), "time": fmt.Sprint(d.Time)})
		}
		cases = append(cases, svmtest.Case{Kind: "account", Name: "StakeAccount", Value: map[string]any{
			"owner": a.Owner.String(), "bump": a.Bump, "autocompound": a.Autocompound, "total": fmt.Sprint(a.Total), "deposits": deps}})
	}
	enc := svmtest.Encode(t, svmtest.IDL("zero_staking"), w.cfg.StakingProgram.String(), cases)
	for i, o := range owners {
		data, err := hex.DecodeString(enc[i].Data)
		if err != nil {
			t.Fatal(err)
		}
		w.e.SetAccount(t, w.cfg.StakePDA(o), w.cfg.StakingProgram, data)
	}
}

func (w *world) maturedOf(t testing.TB, owner solana.PublicKey) uint64 {
	res, err := w.e.RPC.GetAccountInfo(context.Background(), w.cfg.StakePDA(owner))
	if err != nil {
		t.Fatal(err)
	}
	a, err := zerostaking.ParseAccount_StakeAccount(res.Value.Data.GetBinary())
	if err != nil {
		t.Fatal(err)
	}
	var m uint64
	for _, d := range a.Deposits {
		if d.Time <= w.at.Unix()-86400 {
			m += d.Amount
		}
	}
	return m
}

// TestKeeperDayOnSVM runs a day's rewards and payouts for real: USDC into
// reward vaults, a buyback through a fixed-price pool, a Token-2022 burn of
// exactly what the swap returned, worker payouts; then runs it again and
// nothing moves.
func TestKeeperDayOnSVM(t *testing.T) {
	e := svmtest.NewEnv(t)
	for _, tc := range []struct {
		name              string
		compound, failing bool
	}{
		{"plain", false, false},
		{"auto-compounders staked in ZERO", true, false},
		{"compound swap fails: USDC instead", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, e, tc.compound, tc.failing)
			w.encodeWithAnchor(t)
			k := w.keeper(nil)
			rep, err := k.Rewards(context.Background(), w.at, false)
			if err != nil {
				t.Fatal(err)
			}
			if n := e.TransactionCount(t); n == 0 || len(rep.Transfers) == 0 {
				t.Fatalf("dry run planned %d transfers", len(rep.Transfers))
			}
			if r, err := w.ledger.GetRun(context.Background(), "rewards/2026-11-29"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("dry run wrote the ledger: %+v, %v", r, err)
			}
			if err := w.day(k); err != nil {
				t.Fatal(err)
			}
			w.check(t)
			before := e.TransactionCount(t)
			if err := w.day(w.keeper(nil)); err != nil {
				t.Fatal(err)
			}
			if after := e.TransactionCount(t); after != before {
				t.Fatalf("re-running a finished day sent %d transactions", after-before)
			}
			w.check(t)
		})
	}
}

// TestKeeperCrashAtEveryStep kills the keeper at every ledger write and
// every send, before and after it takes effect, then re-runs it until the
// day completes: every staker and worker is paid exactly once and the
// totals reconcile to the base unit.
func TestKeeperCrashAtEveryStep(t *testing.T) {
	e := svmtest.NewEnv(t)
	// Count the steps of a clean day.
	// With auto-compounders: both swaps, the burn and the compound stakes.
	w := newWorld(t, e, true, false)
	count := &crashPoint{at: -1}
	if err := w.day(w.keeper(count)); err != nil {
		t.Fatal(err)
	}
	w.check(t)
	steps := count.n
	t.Logf("a clean day takes %d ledger writes and sends", steps)
	stride := 1
	if testing.Short() {
		stride = 3
	}
	for at := 1; at <= steps; at += stride {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("step%d/after=%v", at, after), func(t *testing.T) {
				w := newWorld(t, e, true, false)
				k := w.keeper(&crashPoint{at: at, after: after})
				err := killed(func() error { return w.day(k) })
				if !errors.Is(err, errCrash) {
					t.Fatalf("crash at step %d did not surface: %v", at, err)
				}
				// Re-run until done. A transaction recorded but never
				// sent stays unknown until its blockhash expires: let
				// those blocks pass first, as time does between runs.
				e.AdvanceBlocks(t, 151)
				if err := w.day(w.keeper(nil)); err != nil {
					t.Fatalf("re-run: %v", err)
				}
				w.check(t)
			})
		}
	}
}

// TestConfirmationTimeoutIsNotFailure: a payout lands but its confirmation
// times out. The keeper reports the outcome unknown and pays nothing
// again; once the transaction is visible a re-run settles it.
func TestConfirmationTimeoutIsNotFailure(t *testing.T) {
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	// This test waits for confirmations that time out.
	w.confirmTimeout = time.Second
	k := w.keeper(nil)
	e.HideLanded(t, 1)
	_, _, err := k.Payouts(context.Background(), "timeout", w.workers, true)
	if !errors.Is(err, keeper.ErrUnresolved) {
		t.Fatalf("err = %v, want ErrUnresolved", err)
	}
	// Re-running while still unknown sends nothing.
	before := e.TransactionCount(t)
	if _, _, err := w.keeper(nil).Payouts(context.Background(), "timeout", w.workers, true); !errors.Is(err, keeper.ErrUnresolved) {
		t.Fatalf("second run: %v", err)
	}
	if e.TransactionCount(t) != before {
		t.Fatal("a re-run resent a transfer whose outcome was unknown")
	}
	e.Reveal(t)
	ts, _, err := w.keeper(nil).Payouts(context.Background(), "timeout", w.workers, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		if tr.State != store.TransferConfirmed || tr.Attempts != 1 {
			t.Fatalf("transfer %+v; want confirmed on its first attempt", tr)
		}
	}
	for _, s := range w.workers {
		want := uint64(0)
		if s.Amount >= keeper.MinPayout {
			want = s.Amount
		}
		if got := e.TokenBalance(t, w.cfg.USDCATA(s.Owner)); got != want {
			t.Fatalf("worker %s = %d, want %d", s.Owner, got, want)
		}
	}
}

// TestLostSendResponse: the send's response is lost after the transaction
// landed; the keeper confirms by signature and does not pay again.
func TestLostSendResponse(t *testing.T) {
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	e.LoseResponses(t, 1)
	ts, _, err := w.keeper(nil).Payouts(context.Background(), "lost", w.workers, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].State != store.TransferConfirmed || ts[0].Attempts != 1 {
		t.Fatalf("transfers %+v", ts)
	}
	if got := e.TokenBalance(t, w.cfg.USDCATA(w.workers[0].Owner)); got != w.workers[0].Amount {
		t.Fatalf("worker paid %d, want %d", got, w.workers[0].Amount)
	}
}

// TestRewardsRefuseAShortfall: when the treasury holds less than what
// customers and workers are owed plus the day's split (here: credits
// granted for a deposit whose USDC never arrived), the keeper refuses, dry
// run or not, and nothing is sent or recorded.
func TestRewardsRefuseAShortfall(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	w.customer(t, "phantom", 1_000_000, 0)
	for _, execute := range []bool{false, true} {
		before := e.TransactionCount(t)
		_, err := w.keeper(nil).Rewards(ctx, w.at, execute)
		var short *keeper.ShortfallError
		if !errors.As(err, &short) {
			t.Fatalf("execute=%v: %v; want a shortfall", execute, err)
		}
		if want := uint64(revenueUSDC); short.Split != want || short.Treasury != treasuryUSDC {
			t.Fatalf("shortfall %+v; want split %d of a treasury of %d", short, want, treasuryUSDC)
		}
		if n := e.TransactionCount(t) - before; n != 0 {
			t.Fatalf("execute=%v sent %d transactions", execute, n)
		}
		if r, err := w.ledger.GetRun(ctx, "rewards/2026-11-29"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("execute=%v recorded a run: %+v, %v", execute, r, err)
		}
	}
}

// TestNextDayWaitsForUnfinishedDay: a day left half-done blocks the next
// one, whose plan needs its carried remainder; once completed, the next
// day runs and carries on from it.
func TestNextDayWaitsForUnfinishedDay(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	k := w.keeper(&crashPoint{at: 8})
	if err := killed(func() error { _, err := k.Rewards(ctx, w.at, true); return err }); !errors.Is(err, errCrash) {
		t.Fatalf("crash: %v", err)
	}
	next := w.at.AddDate(0, 0, 1)
	if _, err := w.keeper(nil).Rewards(ctx, next, true); err == nil || !strings.Contains(err.Error(), "not finished") {
		t.Fatalf("next day over an unfinished one: %v", err)
	}
	e.AdvanceBlocks(t, 151)
	if _, err := w.keeper(nil).Rewards(ctx, w.at, true); err != nil {
		t.Fatal(err)
	}
	carry, _ := w.ledger.Carry(ctx, keeper.CarryRewardUSDC)
	// The next day earns 1 credit (its customer's deposit lands in the
	// treasury), and someone sends the treasury 7 USDC: only the credit
	// is revenue.
	w.customer(t, "next-day", 1, 1)
	e.MintTo(t, w.cfg.USDCMint, onchain.TokenProgram, w.kp.PublicKey(), 10_000+7_000_000)
	rep, err := w.keeper(nil).Rewards(ctx, next, true)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Plan.Split != 10_000 || rep.Plan.RewardPot != 5_000+uint64(carry) {
		t.Fatalf("next day: split %d, pot %d; want the day's 10000 revenue split, pot 5000 + carried %d", rep.Plan.Split, rep.Plan.RewardPot, carry)
	}
	if split, _ := w.ledger.Carry(ctx, keeper.CarryRevenueSplit); split != revenueCredits+1 {
		t.Fatalf("revenue split through %d credits, want %d", split, revenueCredits+1)
	}
}
