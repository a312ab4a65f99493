package keeper_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/stakes"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// BenchmarkKeeperDayOnSVM measures one day's keeper run against the
// LiteSVM harness: read 500 stake accounts, plan, record the ledger, pay
// 500 reward vaults, buy back, burn, and pay 3 workers. The figure is the
// keeper's own cost plus the harness's; a real cluster adds network and
// confirmation time per transaction.
func BenchmarkKeeperDayOnSVM(b *testing.B) {
	e := svmtest.NewEnv(b)
	const stakers = 500
	sent := 0
	for b.Loop() {
		b.StopTimer()
		w := newWorldN(b, e, stakers)
		k := w.keeper(nil)
		before := e.TransactionCount(b)
		b.StartTimer()
		if err := w.day(k); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		sent += e.TransactionCount(b) - before
		b.StartTimer()
	}
	b.ReportMetric(float64(sent)/float64(b.N), "txs/day")
}

var (
	benchStakers  = flag.Int("keeper.stakers", 10_000, "BenchmarkKeeperDayAtFinality: how many stakers")
	benchFinality = flag.Duration("keeper.finality", 13*time.Second, "BenchmarkKeeperDayAtFinality: how long a transaction takes to finalize")
	benchLambda   = flag.Duration("keeper.lambda", 300*time.Second, "BenchmarkKeeperDayAtFinality: the time one invocation has (its context's deadline)")
)

// BenchmarkKeeperDayAtFinality runs a day of payouts and rewards for
// -keeper.stakers stakers (10,000) on the harness with transactions
// finalized -keeper.finality (13 s, as mainnet) after they land, in
// invocations of -keeper.lambda (300 s, a Lambda's timeout) each, with
// the production executor (DefaultWindow, DefaultReserve) and chain
// settings (400 ms poll, 90 s confirmation timeout). It is the steady day:
// every reward vault exists and the transfers load their addresses from
// the keeper's lookup tables (made by EnsureTables beforehand, untimed).
// It reports the wall time, the invocations needed, the transactions, what
// sending them one at a time would take (transactions × finality), and the
// RPC calls the sends and confirmations made. Several minutes per run:
//
//	go test ./onchain/keeper -run '^$' -bench KeeperDayAtFinality -benchtime 1x -timeout 30m
//
// (-keeper.finality=1s -keeper.stakers=2000 for a quick look).
func BenchmarkKeeperDayAtFinality(b *testing.B) {
	ctx := context.Background()
	e := svmtest.NewEnv(b)
	finality := *benchFinality
	for b.Loop() {
		b.StopTimer()
		e.SetFinality(b, 0)
		w := newWorldN(b, e, *benchStakers)
		w.rewardVaults(b)
		calls := &callCounter{Client: e.RPC}
		ch := chain.New(calls)
		ch.Log = slog.New(slog.DiscardHandler)
		k := w.keeper(nil)
		k.Exec.Chain, k.Balances = ch, ch
		k.Exec.Tables = w.tables(b, k)
		e.SetFinality(b, finality)
		calls.reset()
		before := e.TransactionCount(b)
		start := time.Now()
		b.StartTimer()
		invocations := 0
		for {
			invocations++
			sent := e.TransactionCount(b)
			ctx, cancel := context.WithTimeout(ctx, *benchLambda)
			err := w.dayIn(ctx, k)
			cancel()
			if errors.Is(err, keeper.ErrOutOfTime) {
				if e.TransactionCount(b) == sent {
					b.Fatalf("invocation %d sent nothing: %s leaves no time to send before the executor's reserve", invocations, *benchLambda)
				}
				b.Logf("invocation %d ran out of time after %s; resuming", invocations, time.Since(start).Round(time.Second))
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			break
		}
		b.StopTimer()
		wall := time.Since(start)
		txs := e.TransactionCount(b) - before
		w.checkRewards(b)
		n := calls.counts()
		b.ReportMetric(float64(*benchStakers), "stakers")
		b.ReportMetric(float64(txs), "txs")
		b.ReportMetric(finality.Seconds(), "finality-s")
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(float64(invocations), "invocations")
		b.ReportMetric(float64(txs)*finality.Seconds(), "sequential-est-s")
		b.ReportMetric(float64(n["getSignatureStatuses"]), "status-calls")
		b.ReportMetric(float64(n["getBlockHeight"]), "height-calls")
		b.ReportMetric(float64(n["sendTransaction"]+n["getLatestBlockhash"]), "send+blockhash-calls")
		b.StartTimer()
	}
}

// callCounter counts the RPC calls the chain makes, by method.
type callCounter struct {
	*rpc.Client
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method]++
}

func (c *callCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = nil
}

func (c *callCounter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

func (c *callCounter) GetLatestBlockhash(ctx context.Context, commitment rpc.CommitmentType) (*rpc.GetLatestBlockhashResult, error) {
	c.count("getLatestBlockhash")
	return c.Client.GetLatestBlockhash(ctx, commitment)
}

func (c *callCounter) GetBlockHeight(ctx context.Context, commitment rpc.CommitmentType) (uint64, error) {
	c.count("getBlockHeight")
	return c.Client.GetBlockHeight(ctx, commitment)
}

func (c *callCounter) SendTransactionWithOpts(ctx context.Context, tx *solana.Transaction, opts rpc.TransactionOpts) (solana.Signature, error) {
	c.count("sendTransaction")
	return c.Client.SendTransactionWithOpts(ctx, tx, opts)
}

func (c *callCounter) GetSignatureStatuses(ctx context.Context, history bool, sigs ...solana.Signature) (*rpc.GetSignatureStatusesResult, error) {
	c.count("getSignatureStatuses")
	return c.Client.GetSignatureStatuses(ctx, history, sigs...)
}

// newWorldN is newWorld with n plain stakers, their stake accounts
// written in one call.
func newWorldN(b testing.TB, e *svmtest.Env, n int) *world {
	w := newWorld(b, e, false, false)
	accounts := make([]svmtest.Account, 0, n)
	for range n {
		o := svmtest.NewKey(b).PublicKey()
		acct := zerostaking.StakeAccount{Owner: o, Bump: 255, Total: 1_000_000,
			Deposits: []zerostaking.Deposit{{Amount: 1_000_000, Time: w.at.Add(-48 * time.Hour).Unix()}}}
		data, err := acct.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		accounts = append(accounts, svmtest.Account{Address: w.cfg.StakePDA(o), Owner: w.cfg.StakingProgram,
			Data: append(zerostaking.Account_StakeAccount[:], data...)})
		w.stakers = append(w.stakers, o)
	}
	e.SetAccounts(b, accounts)
	return w
}

// rewardVaults writes every staker's empty reward vault, as after its
// first reward: each reward then runs two instructions, not an account
// creation's six.
func (w *world) rewardVaults(b testing.TB) {
	accounts := make([]svmtest.Account, 0, len(w.stakers))
	for _, o := range w.stakers {
		// An SPL token account: mint, owner, amount 0, initialized.
		data := make([]byte, 165)
		copy(data[0:32], w.cfg.USDCMint[:])
		pda := w.cfg.RewardPDA(o)
		copy(data[32:64], pda[:])
		data[108] = 1
		accounts = append(accounts, svmtest.Account{Address: w.cfg.RewardVault(o), Owner: onchain.TokenProgram, Data: data})
	}
	w.e.SetAccounts(b, accounts)
}

// tables makes the keeper's lookup tables with every address of the day
// (EnsureTables, until nothing is missing) and returns them.
func (w *world) tables(b testing.TB, k *keeper.Keeper) onchain.Tables {
	ctx := context.Background()
	k.TableRPC = w.e.RPC
	all, err := stakes.Read(ctx, w.e.RPC, w.cfg)
	if err != nil {
		b.Fatal(err)
	}
	var payees []solana.PublicKey
	for _, p := range w.workers {
		payees = append(payees, p.Owner)
	}
	want := k.TableAddresses(all, payees)
	for run := 1; ; run++ {
		rep, err := k.EnsureTables(ctx, want, true)
		if err != nil {
			b.Fatal(err)
		}
		if rep.Missing == 0 {
			break
		}
		if run == 100 {
			b.Fatalf("after %d upkeeps %+v", run, rep)
		}
		w.e.AdvanceBlocks(b, 1)
	}
	w.e.AdvanceBlocks(b, 1) // extended addresses are usable from the next slot
	tables, err := k.LookupTables(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return tables
}

// checkRewards: every transfer of the day's rewards run was confirmed on
// its first attempt, and each staker's reward vault holds exactly its
// reward.
func (w *world) checkRewards(b testing.TB) {
	ctx := context.Background()
	ts, err := w.ledger.RunTransfers(ctx, "rewards/"+keeper.Day(w.at))
	if err != nil {
		b.Fatal(err)
	}
	want := map[solana.PublicKey]uint64{}
	for _, t := range ts {
		if t.State != store.TransferConfirmed || t.Attempts != 1 {
			b.Fatalf("transfer %s is %s after %d attempts", t.Key, t.State, t.Attempts)
		}
		if t.Kind == keeper.KindReward {
			want[w.cfg.RewardVault(solana.MustPublicKeyFromBase58(t.Recipient))] = uint64(t.Amount)
		}
	}
	// newWorld's four stakers include one too small for a reward.
	if len(want) < len(w.stakers)-1 {
		b.Fatalf("%d rewards for %d stakers", len(want), len(w.stakers))
	}
	var vaults []solana.PublicKey
	for v := range want {
		vaults = append(vaults, v)
	}
	for i := 0; i < len(vaults); i += 100 {
		chunk := vaults[i:min(i+100, len(vaults))]
		res, err := w.e.RPC.GetMultipleAccounts(ctx, chunk...)
		if err != nil {
			b.Fatal(err)
		}
		for j, a := range res.Value {
			if a == nil {
				b.Fatalf("reward vault %s does not exist", chunk[j])
			}
			if got := binary.LittleEndian.Uint64(a.Data.GetBinary()[64:72]); got != want[chunk[j]] {
				b.Fatalf("reward vault %s holds %d, want %d", chunk[j], got, want[chunk[j]])
			}
		}
	}
}

// dayIn is day under ctx: the payouts, then the rewards.
func (w *world) dayIn(ctx context.Context, k *keeper.Keeper) error {
	if _, _, err := k.Payouts(ctx, keeper.Day(w.at), w.workers, true); err != nil {
		return fmt.Errorf("payouts: %w", err)
	}
	if _, err := k.Rewards(ctx, w.at, true); err != nil {
		return fmt.Errorf("rewards: %w", err)
	}
	return nil
}
