package keeper

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// Transfer kinds in the ledger.
const (
	KindReward   = "reward"  // USDC into a staker's reward vault
	KindSwap     = "swap"    // USDC → ZERO (buyback or compound)
	KindBurn     = "burn"    // ZERO burn_checked
	KindStake    = "stake"   // ZERO staked into an auto-compounder's vault
	KindPayout   = "payout"  // USDC to a worker
	swapBuyback  = "buyback" // Recipient of the buyback swap
	swapCompound = "compound"
)

// Carry names in the ledger.
const (
	CarryRewardUSDC   = "reward_usdc"
	CarryCompoundZero = "compound_zero"
	// CarryRevenueSplit is the network's all-time revenue, in credits
	// (store.Money.Revenue), that earlier days split: each day splits
	// what it grew by since.
	CarryRevenueSplit = "revenue_split_credits"
)

// Swapper buys ZERO with USDC: instructions that spend usdcIn from the
// keeper's USDC account and deliver ZERO to the keeper's ZERO account. The
// amount received is read from the landed transaction, never predicted.
type Swapper interface {
	BuyZero(ctx context.Context, keeper solana.PublicKey, usdcIn uint64) (onchain.Group, error)
}

// RewardDelivery is how USDC reaches a staker's reward vault.
type RewardDelivery int

const (
	// DeliverFund calls zero_rewards fund (production).
	DeliverFund RewardDelivery = iota
	// DeliverVaultTransfer transfers USDC straight into the reward vault
	// (the USDC account of the reward PDA), and compounded ZERO straight
	// into the stake vault, creating them if needed, for a cluster without
	// the c0mpute programs (the test SVM). A direct transfer records no
	// deposit in the stake account: never for production.
	DeliverVaultTransfer
)

// Keeper runs the scheduled jobs against one cluster and one ledger.
type Keeper struct {
	Config onchain.Config
	Ledger store.Ledger
	// Earnings are the workers' earnings EarningsPayouts pays out, and
	// the money totals the rewards split is computed from; nil where only
	// explicit payouts (Payouts) run.
	Earnings store.Earnings
	// Accounts are where StakeBoosts finds and boosts accounts; nil where
	// it does not run.
	Accounts Accounts
	Exec     *Executor
	Stakes   stakes.Client
	// TableRPC finds and makes the keeper's lookup tables; nil runs
	// without them (legacy transactions).
	TableRPC TableRPC
	// Accounts reads whether transfers' destination accounts exist
	// (Prepare): a transfer to one that does not may create it, which
	// runs more instructions, so fewer fit a transaction. Nil counts
	// every transfer as creating.
	AccountsRPC AccountsRPC
	// existing are the destination accounts Prepare found.
	existing map[solana.PublicKey]bool
	Balances BalanceReader
	Swap     Swapper
	Delivery RewardDelivery
	// Reserved is USDC (base units) in the treasury that the operator
	// owes beyond what the store knows of (customers' credits and workers'
	// earnings are counted without it): checked, never split.
	Reserved uint64
	// Wallet is the keeper's wallet, which holds the treasury's tokens and
	// signs: set it to plan (a dry run) without the signing key. Zero
	// means Exec.Keeper's public key; when both are set they must be the
	// same wallet (the caller checks).
	Wallet solana.PublicKey
}

// Accounts are the store's accounts as the staker perks see them: by id
// (the allowance's activity) and by payout wallet (the stake boost).
type Accounts interface {
	GetAccount(ctx context.Context, id string) (store.Account, error)
	AccountsPaidTo(ctx context.Context, wallet string) ([]store.Account, error)
	SetStakeBoost(ctx context.Context, accountID string, until time.Time) error
}

// AccountsRPC reads many accounts at once.
type AccountsRPC interface {
	GetMultipleAccountsWithOpts(ctx context.Context, accounts []solana.PublicKey, opts *rpc.GetMultipleAccountsOpts) (*rpc.GetMultipleAccountsResult, error)
}

// destination is the token account a transfer credits, which it creates if
// missing; false for transfers that create none.
func (k *Keeper) destination(t store.Transfer) (solana.PublicKey, bool) {
	to, err := solana.PublicKeyFromBase58(t.Recipient)
	if err != nil {
		return solana.PublicKey{}, false
	}
	switch t.Kind {
	case KindReward:
		return k.Config.RewardVault(to), true
	case KindPayout:
		return k.Config.USDCATA(to), true
	case KindStake:
		return k.Config.StakeVault(to), true
	}
	return solana.PublicKey{}, false
}

// Prepare reads, 100 at a time, whether the destination accounts of ts
// exist, so that Build counts the instructions a transfer really runs.
func (k *Keeper) Prepare(ctx context.Context, ts []store.Transfer) error {
	if k.AccountsRPC == nil {
		return nil
	}
	var addrs []solana.PublicKey
	for _, t := range ts {
		if a, ok := k.destination(t); ok {
			addrs = append(addrs, a)
		}
	}
	if k.existing == nil {
		k.existing = map[solana.PublicKey]bool{}
	}
	for i := 0; i < len(addrs); i += 100 {
		chunk := addrs[i:min(i+100, len(addrs))]
		res, err := k.AccountsRPC.GetMultipleAccountsWithOpts(ctx, chunk, &rpc.GetMultipleAccountsOpts{
			Commitment: rpc.CommitmentConfirmed, DataSlice: &rpc.DataSlice{Offset: ptrU64(0), Length: ptrU64(0)}})
		if err != nil {
			return fmt.Errorf("keeper: read destination accounts: %w", err)
		}
		for j, a := range res.Value {
			if j < len(chunk) {
				k.existing[chunk[j]] = a != nil
			}
		}
	}
	return nil
}

func ptrU64(v uint64) *uint64 { return &v }

// trace is the instruction trace of a transfer: small when its destination
// is known to exist, created otherwise.
func (k *Keeper) trace(t store.Transfer, existing, creating int) int {
	if a, ok := k.destination(t); ok && k.existing[a] {
		return existing
	}
	return creating
}

// BalanceReader reads a token account's balance (chain.Chain via the RPC
// client's getTokenAccountBalance).
type BalanceReader interface {
	TokenBalance(ctx context.Context, account solana.PublicKey) (uint64, error)
}

// keeperPub is the wallet that signs and holds the treasury's tokens.
func (k *Keeper) keeperPub() solana.PublicKey {
	if !k.Wallet.IsZero() {
		return k.Wallet
	}
	return k.Exec.Keeper.PublicKey()
}

// Build is the Builder for every transfer kind.
func (k *Keeper) Build(ctx context.Context, t store.Transfer) (onchain.Group, error) {
	c := k.Config
	kp := k.keeperPub()
	to, err := solana.PublicKeyFromBase58(t.Recipient)
	if err != nil && t.Kind != KindSwap && t.Kind != KindBurn {
		return onchain.Group{}, fmt.Errorf("recipient %q: %w", t.Recipient, err)
	}
	amt := uint64(t.Amount)
	switch t.Kind {
	case KindReward:
		if k.Delivery == DeliverVaultTransfer {
			return onchain.Group{ComputeUnits: 40_000, Trace: k.trace(t, 2, 6), Instructions: []solana.Instruction{
				onchain.CreateATAIdempotent(kp, c.RewardPDA(to), c.USDCMint, onchain.TokenProgram),
				onchain.TransferChecked(onchain.TokenProgram, c.USDCATA(kp), c.USDCMint, c.RewardVault(to), kp, amt, onchain.USDCDecimals),
			}}, nil
		}
		// fund transfers, and makes the reward account and vault the
		// first time (an ATA creation and its calls).
		ix, err := c.Fund(kp, c.USDCATA(kp), to, amt)
		return onchain.Group{ComputeUnits: 60_000, Trace: k.trace(t, 2, 8), Instructions: []solana.Instruction{ix}}, err
	case KindPayout:
		ixs, err := c.USDCPayout(kp, kp, c.USDCATA(kp), to, amt)
		if err != nil {
			return onchain.Group{}, err
		}
		// A memo naming the transfer (by a hash of its key) makes every
		// payout's transaction its own: two payouts of the same amount to
		// the same wallet signed under one blockhash would otherwise be
		// the same transaction, and the second, deduplicated by the
		// cluster, would look landed while paying nothing.
		memo, err := onchain.Memo(payoutMemo(t.Key))
		return onchain.Group{ComputeUnits: 50_000, Trace: k.trace(t, 3, 7), Instructions: append(ixs, memo)}, err
	case KindBurn:
		ix, err := c.BurnZero(c.ZeroATA(kp), kp, amt)
		return onchain.Group{ComputeUnits: 10_000, Trace: 1, Instructions: []solana.Instruction{ix}}, err
	case KindStake:
		if k.Delivery == DeliverVaultTransfer {
			return onchain.Group{ComputeUnits: 40_000, Trace: k.trace(t, 2, 6), Instructions: []solana.Instruction{
				onchain.CreateATAIdempotent(kp, c.StakePDA(to), c.ZeroMint, onchain.Token2022Program),
				onchain.TransferChecked(onchain.Token2022Program, c.ZeroATA(kp), c.ZeroMint, c.StakeVault(to), kp, amt, onchain.ZeroDecimals),
			}}, nil
		}
		ix, err := c.Stake(kp, to, c.ZeroATA(kp), amt)
		return onchain.Group{ComputeUnits: 60_000, Trace: k.trace(t, 3, 9), Instructions: []solana.Instruction{ix}}, err
	case KindSwap:
		if k.Swap == nil {
			return onchain.Group{}, errors.New("no swapper configured")
		}
		g, err := k.Swap.BuyZero(ctx, kp, amt)
		g.Solo = true
		return g, err
	}
	return onchain.Group{}, fmt.Errorf("unknown transfer kind %q", t.Kind)
}

// payoutMemo is the memo of the payout whose ledger key is key: the first
// 16 bytes of its SHA-256, in hex; the key itself names accounts, which
// the chain need not see.
func payoutMemo(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "c0mpute payout " + hex.EncodeToString(sum[:16])
}

// RewardsReport is what a rewards run did or would do.
type RewardsReport struct {
	Day string `json:"day"`
	// Sealed says an earlier run fixed the day's plan: Books, Plan,
	// Stakers and Skipped are then not computed again (zero), and
	// Transfers are the ledger's.
	Sealed bool `json:"sealed"`
	// Books are what the plan was computed and checked from (a sealed
	// day's are not read again: its plan is fixed).
	Books *Books     `json:"books,omitempty"`
	Plan  RewardPlan `json:"plan"`
	// Stakers are every stake account read, with its matured stake;
	// Skipped the stakers the split gives nothing, and why.
	Stakers []Staker `json:"stakers"`
	Skipped []Skip   `json:"skipped"`
	// Transfers are the ledger's entries (for a dry run: what would be
	// recorded).
	Transfers []store.Transfer `json:"transfers"`
	Settle    []store.Transfer `json:"settle,omitempty"`
	Result    Result           `json:"result"`
}

// summary is what a sealed run remembers of its plan.
type summary struct {
	Remainder uint64 `json:"remainder"`
	// RevenueSplit and InflowSplit are the new CarryRevenueSplit and
	// CarryInflowSplit.
	RevenueSplit int64   `json:"revenue_split_credits"`
	InflowSplit  int64   `json:"inflow_split_usdc"`
	Compound     []Share `json:"compound,omitempty"`
	CompoundUSDC uint64  `json:"compound_usdc"`
	BurnPot      uint64  `json:"burn_pot"`
}

func rewardRun(day string) string { return "rewards/" + day }
func settleRun(day string) string { return "rewards-settle/" + day }

// rewardTransfers turns a plan into ledger transfers.
func rewardTransfers(run string, c onchain.Config, p RewardPlan) []store.Transfer {
	var ts []store.Transfer
	add := func(kind, recipient, mint string, amount uint64) {
		ts = append(ts, store.Transfer{Key: run + "/" + kind + "/" + recipient, Seq: len(ts), Kind: kind,
			Recipient: recipient, Mint: mint, Amount: int64(amount)})
	}
	if p.BurnPot > 0 {
		add(KindSwap, swapBuyback, c.USDCMint.String(), p.BurnPot)
	}
	if p.CompoundUSDC > 0 {
		add(KindSwap, swapCompound, c.USDCMint.String(), p.CompoundUSDC)
	}
	for _, s := range p.Rewards {
		add(KindReward, s.Owner.String(), c.USDCMint.String(), s.Amount)
	}
	return ts
}

// Books are what the treasury holds, owes and earned, in USDC base units
// unless named credits: what the day's split is computed and checked from.
type Books struct {
	TreasuryUSDC uint64 `json:"treasury_usdc"`
	// CustomerCredits is customers' unspent credits, those held by
	// running jobs included; UnpaidEarnings workers' earnings not paid
	// out yet (payouts on their way included); Reserved the operator's
	// own reserve. Liabilities is their sum.
	CustomerCredits uint64 `json:"customer_credits"`
	UnpaidEarnings  uint64 `json:"unpaid_earnings"`
	Reserved        uint64 `json:"reserved"`
	Liabilities     uint64 `json:"liabilities"`
	CarriedRewards  uint64 `json:"carried_rewards"`
	// RevenueCredits is the network's revenue all time (negative while
	// the workers' share of free jobs and the credits given away exceed
	// what paid jobs kept); SplitCredits the part earlier days split.
	// Revenue, today's split, is what the first exceeds the second by.
	RevenueCredits int64 `json:"revenue_credits"`
	SplitCredits   int64 `json:"split_credits"`
	// Inflows are recorded trading-fee USDC not split yet (RecordInflow);
	// InflowsTotal all recorded.
	Inflows      uint64 `json:"inflows"`
	InflowsTotal uint64 `json:"inflows_total"`
	// Revenue is today's split: the store's revenue since the last split
	// plus the inflows.
	Revenue uint64 `json:"revenue"`
}

// ReadBooks reads the treasury's balance, the store's money totals, the
// workers' unpaid earnings (with every payout of an open run that has not
// left the treasury) and the ledger's carries as of at.
func (k *Keeper) ReadBooks(ctx context.Context, at time.Time) (Books, error) {
	if k.Earnings == nil {
		return Books{}, errors.New("keeper: the rewards split needs the store's money totals")
	}
	bal, err := k.Balances.TokenBalance(ctx, k.Config.USDCATA(k.keeperPub()))
	if err != nil {
		return Books{}, fmt.Errorf("keeper: treasury balance: %w", err)
	}
	money, err := k.Earnings.MoneyTotals(ctx)
	if err != nil {
		return Books{}, err
	}
	unpaid, err := k.UnpaidEarnings(ctx)
	if err != nil {
		return Books{}, err
	}
	carry, err := k.Ledger.Carry(ctx, CarryRewardUSDC)
	if err != nil {
		return Books{}, err
	}
	split, err := k.Ledger.Carry(ctx, CarryRevenueSplit)
	if err != nil {
		return Books{}, err
	}
	inflows, err := k.Ledger.Carry(ctx, CarryInflowUSDC)
	if err != nil {
		return Books{}, err
	}
	inflowsSplit, err := k.Ledger.Carry(ctx, CarryInflowSplit)
	if err != nil {
		return Books{}, err
	}
	b := Books{TreasuryUSDC: bal, CustomerCredits: CreditsToUSDC(max(money.CustomerCredits(), 0)),
		UnpaidEarnings: unpaid, Reserved: k.Reserved, CarriedRewards: uint64(carry),
		RevenueCredits: money.Revenue(), SplitCredits: split}
	b.Liabilities = b.CustomerCredits + b.UnpaidEarnings + b.Reserved
	if b.RevenueCredits > b.SplitCredits {
		b.Revenue = CreditsToUSDC(b.RevenueCredits - b.SplitCredits)
	}
	b.InflowsTotal = uint64(max(inflows, 0))
	if inflows > inflowsSplit {
		b.Inflows = uint64(inflows - inflowsSplit)
	}
	b.Revenue += b.Inflows
	return b, nil
}

// PlanRewardsNow reads the chain, the store's books and the ledger's carry
// and computes the day's plan, writing nothing.
func (k *Keeper) PlanRewardsNow(ctx context.Context, at time.Time) (RewardPlan, Books, error) {
	p, b, _, err := k.planRewardsNow(ctx, at)
	return p, b, err
}

func (k *Keeper) planRewardsNow(ctx context.Context, at time.Time) (RewardPlan, Books, []stakes.Stake, error) {
	all, err := stakes.Read(ctx, k.Stakes, k.Config)
	if err != nil {
		return RewardPlan{}, Books{}, nil, err
	}
	b, err := k.ReadBooks(ctx, at)
	if err != nil {
		return RewardPlan{}, Books{}, nil, err
	}
	p, err := PlanRewards(RewardInputs{At: at, Revenue: b.Revenue, TreasuryUSDC: b.TreasuryUSDC,
		Liabilities: b.Liabilities, CarriedRewards: b.CarriedRewards, Stakes: all})
	return p, b, all, err
}

// Rewards runs (execute) or only plans (dry run) the 15:00 UTC job of at's
// day. Re-running it after any crash completes the day: a sealed plan is
// never recomputed.
func (k *Keeper) Rewards(ctx context.Context, at time.Time, execute bool) (RewardsReport, error) {
	day := Day(at)
	run := rewardRun(day)
	rep := RewardsReport{Day: day, Stakers: []Staker{}, Skipped: []Skip{}}
	existing, err := k.Ledger.GetRun(ctx, run)
	sealed := err == nil && existing.State != store.RunPlanning
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rep, err
	}
	rep.Sealed = sealed
	if !sealed {
		// The carry comes from the last finished day: a day left half-done
		// must be completed first, or its remainder would be counted twice
		// or lost.
		for _, prev := range []string{rewardRun(Day(at.AddDate(0, 0, -1))), settleRun(Day(at.AddDate(0, 0, -1)))} {
			r, err := k.Ledger.GetRun(ctx, prev)
			if err == nil && r.State != store.RunDone {
				return rep, fmt.Errorf("keeper: %s is not finished; run that day first", prev)
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return rep, err
			}
		}
		// Payouts left open would make the workers' unpaid earnings an
		// estimate (on the safe side): an execution finishes them first,
		// so the books are exact.
		if execute {
			if err := k.FinishOpenEarnings(ctx); err != nil {
				return rep, err
			}
		}
		p, b, all, err := k.planRewardsNow(ctx, at)
		if err != nil {
			return rep, err
		}
		rep.Plan, rep.Books = p, &b
		rep.Stakers = stakersAt(all, at)
		rep.Skipped = stakeSkips(rep.Stakers, append(append([]Share{}, p.Rewards...), p.Compound...), nil)
		rep.Transfers = rewardTransfers(run, k.Config, p)
		if !execute {
			return rep, nil
		}
		sum := summary{Remainder: p.Remainder, RevenueSplit: max(b.SplitCredits, b.RevenueCredits), InflowSplit: int64(b.InflowsTotal),
			Compound: p.Compound, CompoundUSDC: p.CompoundUSDC, BurnPot: p.BurnPot}
		if err := k.seal(ctx, run, rep.Transfers, sum); err != nil {
			return rep, err
		}
	}
	if rep.Transfers, err = k.Ledger.RunTransfers(ctx, run); err != nil {
		return rep, err
	}
	if !execute {
		return rep, nil
	}
	r, err := k.Ledger.GetRun(ctx, run)
	if err != nil {
		return rep, err
	}
	var sum summary
	if err := json.Unmarshal([]byte(r.Summary), &sum); err != nil {
		return rep, fmt.Errorf("keeper: run %s summary: %w", run, err)
	}
	if r.State != store.RunDone {
		if rep.Result, err = k.Exec.Execute(ctx, run); err != nil {
			return rep, err
		}
		carries := map[string]int64{CarryRewardUSDC: int64(sum.Remainder), CarryRevenueSplit: sum.RevenueSplit,
			CarryInflowSplit: sum.InflowSplit}
		if err := k.Ledger.FinishRun(ctx, run, carries, k.Exec.now()); err != nil {
			return rep, err
		}
	}
	if rep.Transfers, err = k.Ledger.RunTransfers(ctx, run); err != nil {
		return rep, err
	}
	// Second stage: burn exactly what the buyback returned, stake what the
	// compound swap returned, or pay compounders in USDC if it failed.
	if rep.Settle, err = k.settle(ctx, day, sum, rep.Transfers); err != nil {
		return rep, err
	}
	return rep, nil
}

// seal writes a plan into a run and seals it; a plan interrupted before
// its seal is rebuilt.
func (k *Keeper) seal(ctx context.Context, run string, ts []store.Transfer, sum summary) error {
	now := k.Exec.now()
	if _, _, err := k.Ledger.StartRun(ctx, store.KeeperRun{ID: run, Created: now}); err != nil {
		return err
	}
	if err := k.Ledger.ResetPlan(ctx, run); err != nil {
		return err
	}
	// Chunks keep each ledger write small (DynamoDB transactions hold at
	// most 100 items).
	const chunk = store.MaxTransfersPerAdd
	for i := 0; i < len(ts); i += chunk {
		if err := k.Ledger.AddTransfers(ctx, run, ts[i:min(i+chunk, len(ts))], now); err != nil {
			return err
		}
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	return k.Ledger.SealPlan(ctx, run, len(ts), string(b), now)
}

func (k *Keeper) settle(ctx context.Context, day string, sum summary, first []store.Transfer) ([]store.Transfer, error) {
	run := settleRun(day)
	r, err := k.Ledger.GetRun(ctx, run)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil || r.State == store.RunPlanning {
		var ts []store.Transfer
		add := func(kind string, recipient solana.PublicKey, mint solana.PublicKey, amount uint64) {
			if amount == 0 {
				return
			}
			ts = append(ts, store.Transfer{Key: run + "/" + kind + "/" + recipient.String(), Seq: len(ts), Kind: kind,
				Recipient: recipient.String(), Mint: mint.String(), Amount: int64(amount)})
		}
		carryZero, err := k.Ledger.Carry(ctx, CarryCompoundZero)
		if err != nil {
			return nil, err
		}
		newCarry := carryZero
		for _, t := range first {
			if t.Kind != KindSwap {
				continue
			}
			received := int64(0)
			if t.State == store.TransferConfirmed {
				sig, err := solana.SignatureFromBase58(t.Signature)
				if err != nil {
					return nil, err
				}
				if received, err = k.Exec.Chain.TokenDelta(ctx, sig, k.Config.ZeroATA(k.keeperPub())); err != nil {
					return nil, err
				}
				if received < 0 {
					return nil, fmt.Errorf("keeper: swap %s lost ZERO", t.Signature)
				}
			}
			switch {
			case t.Recipient == swapBuyback:
				add(KindBurn, k.keeperPub(), k.Config.ZeroMint, uint64(received))
			case t.Recipient == swapCompound && t.State == store.TransferConfirmed:
				shares, rem := PlanCompound(uint64(received), uint64(carryZero), sum.Compound)
				for _, s := range shares {
					add(KindStake, s.Owner, k.Config.ZeroMint, s.Amount)
				}
				newCarry = int64(rem)
			case t.Recipient == swapCompound:
				// The swap failed: the day's rewards arrive as USDC.
				for _, s := range sum.Compound {
					add(KindReward, s.Owner, k.Config.USDCMint, s.Amount)
				}
			}
		}
		b, _ := json.Marshal(map[string]int64{CarryCompoundZero: newCarry})
		if err := k.sealRaw(ctx, run, ts, string(b)); err != nil {
			return nil, err
		}
	}
	r, err = k.Ledger.GetRun(ctx, run)
	if err != nil {
		return nil, err
	}
	if r.State != store.RunDone {
		if _, err := k.Exec.Execute(ctx, run); err != nil {
			return nil, err
		}
		var carries map[string]int64
		if err := json.Unmarshal([]byte(r.Summary), &carries); err != nil {
			return nil, fmt.Errorf("keeper: run %s summary: %w", run, err)
		}
		if err := k.Ledger.FinishRun(ctx, run, carries, k.Exec.now()); err != nil {
			return nil, err
		}
	}
	return k.Ledger.RunTransfers(ctx, run)
}

func (k *Keeper) sealRaw(ctx context.Context, run string, ts []store.Transfer, summary string) error {
	now := k.Exec.now()
	if _, _, err := k.Ledger.StartRun(ctx, store.KeeperRun{ID: run, Created: now}); err != nil {
		return err
	}
	if err := k.Ledger.ResetPlan(ctx, run); err != nil {
		return err
	}
	for i := 0; i < len(ts); i += store.MaxTransfersPerAdd {
		if err := k.Ledger.AddTransfers(ctx, run, ts[i:min(i+store.MaxTransfersPerAdd, len(ts))], now); err != nil {
			return err
		}
	}
	return k.Ledger.SealPlan(ctx, run, len(ts), summary, now)
}

// PayoutsReport is what a payouts run did or would do.
type PayoutsReport struct {
	Run string `json:"run"`
	// Sealed says an earlier run fixed the plan: Transfers are the
	// ledger's, and Skipped is not computed again (empty).
	Sealed    bool             `json:"sealed"`
	Transfers []store.Transfer `json:"transfers"`
	// Skipped are those owed whom the run does not pay, and why.
	Skipped []Skip `json:"skipped"`
	Result  Result `json:"result"`
}

// Payouts is PayOwed's transfers and result.
func (k *Keeper) Payouts(ctx context.Context, id string, owed []Share, execute bool) ([]store.Transfer, Result, error) {
	rep, err := k.PayOwed(ctx, id, owed, execute)
	if err != nil {
		return nil, rep.Result, err
	}
	return rep.Transfers, rep.Result, nil
}

// PayOwed pays workers what they are owed in USDC (at or above MinPayout)
// as the run id, once: the same id never pays twice. Without execute it
// only plans, or shows the ledger's plan of a run sealed before.
func (k *Keeper) PayOwed(ctx context.Context, id string, owed []Share, execute bool) (PayoutsReport, error) {
	run := "payouts/" + id
	rep := PayoutsReport{Run: run, Transfers: []store.Transfer{}, Skipped: []Skip{}}
	ts := []store.Transfer{}
	for _, s := range PlanPayouts(owed, MinPayout) {
		ts = append(ts, store.Transfer{Key: run + "/" + KindPayout + "/" + s.Owner.String(), Seq: len(ts), Kind: KindPayout,
			Recipient: s.Owner.String(), Mint: k.Config.USDCMint.String(), Amount: int64(s.Amount)})
	}
	for _, s := range owed {
		if s.Amount < MinPayout {
			rep.Skipped = append(rep.Skipped, Skip{Wallet: s.Owner.String(), Reason: SkipBelowMinimum, USDC: s.Amount})
		}
	}
	sortSkips(rep.Skipped)
	r, err := k.Ledger.GetRun(ctx, run)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return rep, err
	}
	sealed := err == nil && r.State != store.RunPlanning
	if sealed {
		rep.Sealed, rep.Skipped = true, []Skip{}
	}
	if !execute {
		if !sealed {
			rep.Transfers = ts
			return rep, nil
		}
		rep.Transfers, err = k.Ledger.RunTransfers(ctx, run)
		return rep, err
	}
	if !sealed {
		if err := k.sealRaw(ctx, run, ts, "{}"); err != nil {
			return rep, err
		}
	}
	if r.State != store.RunDone {
		if rep.Result, err = k.Exec.Execute(ctx, run); err != nil {
			return rep, err
		}
		if err := k.Ledger.FinishRun(ctx, run, nil, k.Exec.now()); err != nil {
			return rep, err
		}
	}
	rep.Transfers, err = k.Ledger.RunTransfers(ctx, run)
	return rep, err
}

// activeWindow is how recent an account's last request that cost
// something must be for its staker to share the allowance (SPEC: 7 days).
const activeWindow = 7 * 24 * time.Hour

// resetDays is how many earlier days' allowances a day's run takes back:
// a week, so that runs missed for a few days still leave nobody an old
// allowance.
const resetDays = 7

// AllowanceReport is what a day's allowance run did or would do.
type AllowanceReport struct {
	Day string `json:"day"`
	// Pool is the day's credits; Cap the most one staker gets (the pool's
	// CapBasisPoints).
	Pool           int64 `json:"pool"`
	CapBasisPoints int64 `json:"cap_bp"`
	Cap            int64 `json:"cap"`
	// Stakers are every stake account read, with its matured stake;
	// Skipped the stakers given no allowance, and why.
	Stakers []Staker `json:"stakers"`
	Skipped []Skip   `json:"skipped"`
	// Shares are the day's allowances, in credits, to the accounts of
	// active stakers (account id = wallet).
	Shares []Share `json:"shares"`
	// Reset are the accounts whose earlier allowance the day takes back
	// (to 0): their staker stopped staking or using the network.
	Reset []string `json:"reset"`
}

// Allowance sets the day's free-credit allowance: the pool shared by
// matured stake among stakers whose account (its id is the staking wallet)
// made a request that cost something in the last 7 days, each capped; and
// every account given an allowance on the 7 days before that gets none
// today is set to 0. Each account's allowance is set once per day, so a
// re-run changes nothing.
func (k *Keeper) Allowance(ctx context.Context, at time.Time, pool, capBP int64, execute bool) (AllowanceReport, error) {
	rep := AllowanceReport{Day: Day(at), Pool: pool, CapBasisPoints: capBP, Shares: []Share{}, Reset: []string{},
		Stakers: []Staker{}, Skipped: []Skip{}}
	if pool >= 0 && capBP >= 0 {
		rep.Cap = pool * capBP / 10_000
	}
	if k.Accounts == nil {
		return rep, errors.New("keeper: the allowance needs the store's accounts")
	}
	all, err := stakes.Read(ctx, k.Stakes, k.Config)
	if err != nil {
		return rep, err
	}
	rep.Stakers = stakersAt(all, at)
	var readErr error
	left := map[string]bool{}
	var skipped []Skip
	active := func(owner solana.PublicKey) bool {
		a, err := k.Accounts.GetAccount(ctx, owner.String())
		if err != nil {
			if !errors.Is(err, store.ErrNotFound) && readErr == nil {
				readErr = err
			}
			// A staker who never signed in has no account to credit.
			left[owner.String()] = true
			skipped = append(skipped, Skip{Wallet: owner.String(), Reason: SkipNoAccount})
			return false
		}
		if a.LastRequest.Before(at.Add(-activeWindow)) {
			left[owner.String()] = true
			skipped = append(skipped, Skip{Wallet: owner.String(), Account: a.ID, Reason: SkipInactive, LastRequest: a.LastRequest})
			return false
		}
		return true
	}
	shares, err := PlanAllowance(AllowanceInputs{At: at, Stakes: all, Active: active, Pool: pool, CapBasisPoints: capBP})
	if err == nil {
		err = readErr
	}
	if err != nil {
		return rep, err
	}
	rep.Shares = append(rep.Shares, shares...)
	matured := map[string]uint64{}
	for _, s := range rep.Stakers {
		matured[s.Owner] = s.Matured
	}
	for i := range skipped {
		skipped[i].Stake = matured[skipped[i].Wallet]
	}
	rep.Skipped = append(skipped, stakeSkips(rep.Stakers, shares, left)...)
	sortSkips(rep.Skipped)
	given := map[string]bool{}
	for _, s := range shares {
		given[s.Owner.String()] = true
	}
	seen := map[string]bool{}
	for d := 1; d <= resetDays; d++ {
		ids, err := k.Ledger.AllowanceAccounts(ctx, Day(at.AddDate(0, 0, -d)))
		if err != nil {
			return rep, err
		}
		for _, id := range ids {
			if !given[id] && !seen[id] {
				seen[id] = true
				rep.Reset = append(rep.Reset, id)
			}
		}
	}
	sort.Strings(rep.Reset)
	if !execute {
		return rep, nil
	}
	for _, s := range shares {
		if _, err := k.Ledger.SetDailyAllowance(ctx, s.Owner.String(), rep.Day, int64(s.Amount)); err != nil {
			return rep, err
		}
	}
	for _, id := range rep.Reset {
		if _, err := k.Ledger.SetDailyAllowance(ctx, id, rep.Day, 0); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// DefaultBoostMin is the matured stake that earns the stake boost (SPEC:
// 500,000 ZERO), in ZERO base units.
const DefaultBoostMin = 500_000 * 1_000_000

// boostGrace is how long past the next day's start a boost lasts, so that a
// daily run a little late does not drop it for a while.
const boostGrace = 2 * time.Hour

// Boost is one account the stake boost reaches: its payout wallet holds
// Matured ZERO (base units) of matured stake.
type Boost struct {
	Wallet  string    `json:"wallet"`
	Account string    `json:"account"`
	Matured uint64    `json:"matured"`
	Until   time.Time `json:"until"`
}

// BoostReport is what a day's stake boost run did or would do.
type BoostReport struct {
	// Minimum is the matured stake that earns the boost, in ZERO base
	// units; Until is when the day's boosts end.
	Minimum uint64    `json:"minimum"`
	Until   time.Time `json:"until"`
	Boosts  []Boost   `json:"boosts"`
	// Skipped are the wallets holding the minimum whose boost reaches no
	// account: none has them as its payout wallet.
	Skipped []Skip `json:"skipped"`
}

// StakeBoosts is StakeBoostReport's boosts.
func (k *Keeper) StakeBoosts(ctx context.Context, at time.Time, minimum uint64, execute bool) ([]Boost, error) {
	rep, err := k.StakeBoostReport(ctx, at, minimum, execute)
	return rep.Boosts, err
}

// StakeBoostReport reads every stake account and boosts, until the start
// of the next day plus a grace, each account whose payout wallet has at
// least minimum ZERO of matured stake at at. A boost not renewed lapses by
// itself: an account whose wallet unstaked loses it the next day. Without
// execute it only lists them.
func (k *Keeper) StakeBoostReport(ctx context.Context, at time.Time, minimum uint64, execute bool) (BoostReport, error) {
	until := at.UTC().Truncate(24 * time.Hour).Add(24*time.Hour + boostGrace)
	rep := BoostReport{Minimum: minimum, Until: until, Skipped: []Skip{}}
	if k.Accounts == nil {
		return rep, errors.New("keeper: the stake boost needs the store's accounts")
	}
	all, err := stakes.Read(ctx, k.Stakes, k.Config)
	if err != nil {
		return rep, err
	}
	var out []Boost
	for owner, matured := range stakes.Matured(all, at) {
		if matured < minimum {
			continue
		}
		accounts, err := k.Accounts.AccountsPaidTo(ctx, owner.String())
		if err != nil {
			return rep, err
		}
		if len(accounts) == 0 {
			rep.Skipped = append(rep.Skipped, Skip{Wallet: owner.String(), Reason: SkipNoAccount, Stake: matured})
		}
		for _, a := range accounts {
			out = append(out, Boost{Wallet: owner.String(), Account: a.ID, Matured: matured, Until: until})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Account < out[j].Account })
	sortSkips(rep.Skipped)
	rep.Boosts = out
	if !execute {
		return rep, nil
	}
	for _, b := range out {
		if err := k.Accounts.SetStakeBoost(ctx, b.Account, b.Until); err != nil {
			return rep, fmt.Errorf("keeper: boost %s: %w", b.Account, err)
		}
	}
	return rep, nil
}

// FeeEstimate is what sending a run's transfers would cost the keeper's
// wallet, packed as the executor would pack them now.
type FeeEstimate struct {
	Transactions int    `json:"transactions"`
	ComputeUnits uint64 `json:"compute_units"`
	// PriorityFee is the price assumed, in micro-lamports per compute
	// unit.
	PriorityFee uint64 `json:"priority_fee"`
	// Lamports is every transaction's base and priority fees.
	Lamports uint64 `json:"lamports"`
	// NewAccounts counts the destination accounts that do not exist yet:
	// a transfer to one creates it, and the keeper's wallet pays its rent
	// (not in Lamports).
	NewAccounts int `json:"new_accounts"`
	// Unbuilt counts the swaps that could not be built (no swapper): each
	// is counted as a transaction of its own at swapUnits.
	Unbuilt int `json:"unbuilt"`
}

// swapUnits is the compute a PumpSwap buy asks for (pumpswap.Swapper):
// what an estimate made without a pool assumes.
const swapUnits = 200_000

// EstimateFees packs the transfers of ts still to send as the executor
// would, at priorityFee and with tables, and prices them. It reads whether
// the destination accounts exist, and sends and writes nothing.
func (k *Keeper) EstimateFees(ctx context.Context, ts []store.Transfer, priorityFee uint64, tables onchain.Tables) (FeeEstimate, error) {
	est := FeeEstimate{PriorityFee: priorityFee}
	var todo []store.Transfer
	for _, t := range ts {
		if t.State == "" || t.State == store.TransferPlanned || t.State == store.TransferSent {
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		return est, nil
	}
	if err := k.Prepare(ctx, todo); err != nil {
		return est, err
	}
	var groups []onchain.Group
	for _, t := range todo {
		if t.Kind == KindSwap && k.Swap == nil {
			est.Unbuilt++
			est.Transactions++
			est.ComputeUnits += swapUnits
			est.Lamports += onchain.Fees{ComputeUnits: swapUnits, MicroLamportsPerCU: priorityFee}.LamportsFor(1)
			continue
		}
		g, err := k.Build(ctx, t)
		if err != nil {
			return est, fmt.Errorf("keeper: estimate fees: build transfer %s: %w", t.Key, err)
		}
		groups = append(groups, g)
		if a, ok := k.destination(t); ok && !k.existing[a] {
			est.NewAccounts++
		}
	}
	batches, err := onchain.Pack(k.keeperPub(), groups, onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: priorityFee}, tables)
	if err != nil {
		return est, fmt.Errorf("keeper: estimate fees: pack: %w", err)
	}
	for _, b := range batches {
		var units uint32
		for _, i := range b {
			units += groups[i].ComputeUnits
		}
		est.Transactions++
		est.ComputeUnits += uint64(units)
		est.Lamports += onchain.Fees{ComputeUnits: units, MicroLamportsPerCU: priorityFee}.LamportsFor(1)
	}
	return est, nil
}
