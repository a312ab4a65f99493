package keepercli

import (
	"fmt"
	"strings"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
)

// Report is what one c0mpute-keeper run did or would do: printed as text
// for people, or with -json as one JSON document. Field names are stable;
// amounts of USDC, ZERO and SOL are decimal strings with all their decimals
// ("1.600000"), credits whole numbers; a list with nothing in it is [],
// and no time is ever printed as a zero time.
type Report struct {
	Command string `json:"command"`
	// Execute is false for a dry run: nothing was recorded or sent.
	Execute bool `json:"execute"`
	// Day is the UTC day the run belongs to; At the hour a
	// requested-payouts run names.
	Day      string       `json:"day,omitempty"`
	At       string       `json:"at,omitempty"`
	Ledger   LedgerView   `json:"ledger"`
	Treasury TreasuryView `json:"treasury"`
	// One of these, by command (allowance: the first three).
	Allowance    *AllowanceView `json:"allowance,omitempty"`
	StakeBoosts  *BoostsView    `json:"stake_boosts,omitempty"`
	LookupTables *TablesView    `json:"lookup_tables,omitempty"`
	Rewards      *RewardsView   `json:"rewards,omitempty"`
	Payouts      *PayoutsView   `json:"payouts,omitempty"`
	Inflow       *InflowView    `json:"inflow,omitempty"`
}

// LedgerView is the store the run read (and with -execute wrote).
type LedgerView struct {
	Store string `json:"store"`
	// Access is read_write (-execute), read_only (a dry run) or empty (a
	// dry run whose embedded store does not exist yet: planned against an
	// empty ledger, the file not created).
	Access string `json:"access"`
}

// TreasuryView is the keeper's wallet, which is the treasury, as the run
// left it.
type TreasuryView struct {
	Wallet      string `json:"wallet"`
	USDCAccount string `json:"usdc_account"`
	// USDCAccountExists is false when the wallet has no USDC account yet
	// (USDC is then 0).
	USDCAccountExists bool   `json:"usdc_account_exists"`
	USDC              string `json:"usdc"`
	SOL               string `json:"sol"`
}

// RewardsView is the 15:00 UTC split.
type RewardsView struct {
	Run string `json:"run"`
	// Sealed: an earlier run fixed the day's plan; Books and Split are
	// then null (not computed again) and Transfers are the ledger's.
	Sealed bool       `json:"sealed"`
	Books  *BooksView `json:"books"`
	Split  *SplitView `json:"split"`
	// Stakers are those the split pays; Skipped those it does not, and
	// why.
	Stakers   []StakerRewardView `json:"stakers"`
	Skipped   []SkipView         `json:"skipped"`
	Transfers []TransferView     `json:"transfers"`
	// Settle is the second stage (burn, stake), planned from the first
	// stage's landed swaps: empty in a dry run.
	Settle      []TransferView `json:"settle"`
	FeeEstimate *FeesView      `json:"fee_estimate,omitempty"`
	Result      *ResultView    `json:"result,omitempty"`
}

// BooksView is what the split was computed and checked from, in USDC.
type BooksView struct {
	TreasuryUSDC string `json:"treasury_usdc"`
	// Liabilities are kept, never split: customers' unspent credits,
	// workers' unpaid earnings and the -reserve.
	CustomerCreditsUSDC string `json:"customer_credits_usdc"`
	UnpaidEarningsUSDC  string `json:"unpaid_earnings_usdc"`
	ReserveUSDC         string `json:"reserve_usdc"`
	LiabilitiesUSDC     string `json:"liabilities_usdc"`
	CarriedRewardsUSDC  string `json:"carried_rewards_usdc"`
	// RevenueCredits is the revenue all time, SplitCredits what earlier
	// days split of it; InflowsUSDC recorded trading fees not split yet.
	RevenueCredits int64  `json:"revenue_credits"`
	SplitCredits   int64  `json:"split_credits"`
	InflowsUSDC    string `json:"inflows_usdc"`
	// RevenueUSDC is today's split: revenue since the last split plus
	// the inflows.
	RevenueUSDC string `json:"revenue_usdc"`
	// AboveBooksUSDC is what the treasury holds beyond all of that
	// (payments outside deposits): it stays, never split.
	AboveBooksUSDC string `json:"above_books_usdc"`
}

// SplitView is the day's split of the revenue.
type SplitView struct {
	SplitUSDC   string `json:"split_usdc"`
	BurnPotUSDC string `json:"burn_pot_usdc"`
	// RewardPotUSDC is half the split plus the carried remainder.
	RewardPotUSDC    string `json:"reward_pot_usdc"`
	CompoundUSDC     string `json:"compound_usdc"`
	RemainderUSDC    string `json:"remainder_usdc"`
	MaturedTotalZERO string `json:"matured_total_zero"`
}

// StakerRewardView is one staker's reward.
type StakerRewardView struct {
	Owner       string `json:"owner"`
	MaturedZERO string `json:"matured_zero"`
	USDC        string `json:"usdc"`
	// Delivery is reward_vault (USDC to claim) or compound (swapped to
	// ZERO with the other auto-compounders' and staked).
	Delivery string `json:"delivery"`
}

// SkipView is someone a run leaves out: Reason a stable code, Detail the
// why in words.
type SkipView struct {
	Wallet      string `json:"wallet,omitempty"`
	Account     string `json:"account,omitempty"`
	Reason      string `json:"reason"`
	Detail      string `json:"detail"`
	Credits     int64  `json:"credits,omitempty"`
	USDC        string `json:"usdc,omitempty"`
	StakeZERO   string `json:"stake_zero,omitempty"`
	LastRequest string `json:"last_request,omitempty"`
}

// TransferView is one ledger transfer.
type TransferView struct {
	Key       string `json:"key"`
	Kind      string `json:"kind"`
	Recipient string `json:"recipient"`
	// Account and Credits: an earnings payout's account and the credits
	// it pays.
	Account string `json:"account,omitempty"`
	Credits int64  `json:"credits,omitempty"`
	Amount  string `json:"amount"`
	Token   string `json:"token"`
	// State is planned (in a dry run: what it would be recorded as),
	// sent, confirmed or failed.
	State     string `json:"state"`
	Signature string `json:"signature,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
	Updated   string `json:"updated,omitempty"`
}

// FeesView estimates what sending the plan costs the keeper's wallet.
type FeesView struct {
	Transactions int    `json:"transactions"`
	ComputeUnits uint64 `json:"compute_units"`
	// PriorityFee is micro-lamports per compute unit (the recent median,
	// capped by priority_fee_cap).
	PriorityFee uint64 `json:"priority_fee_micro_lamports"`
	SOL         string `json:"sol"`
	// NewAccounts are destination accounts that do not exist yet: each
	// costs its rent (about 0.002 SOL) besides.
	NewAccounts int `json:"new_accounts"`
	// UnbuiltSwaps were counted at a typical swap's compute: no pool is
	// configured to build them.
	UnbuiltSwaps int `json:"unbuilt_swaps"`
}

// ResultView is what an execution sent.
type ResultView struct {
	Confirmed    int    `json:"confirmed"`
	Failed       int    `json:"failed"`
	Transactions int    `json:"transactions"`
	FeesSOL      string `json:"fees_sol"`
}

// AllowanceView is the day's free-credit allowance.
type AllowanceView struct {
	Day         string `json:"day"`
	PoolCredits int64  `json:"pool_credits"`
	CapBP       int64  `json:"cap_bp"`
	CapCredits  int64  `json:"cap_credits"`
	// Shares go to active stakers' accounts (account id = wallet).
	Shares []AllowanceShareView `json:"shares"`
	// Reset are accounts whose earlier allowance is set to 0.
	Reset   []string   `json:"reset"`
	Skipped []SkipView `json:"skipped"`
}

// AllowanceShareView is one staker's allowance.
type AllowanceShareView struct {
	Account     string `json:"account"`
	MaturedZERO string `json:"matured_zero"`
	Credits     int64  `json:"credits"`
	// Capped: the share was cut to the cap.
	Capped bool `json:"capped"`
}

// BoostsView is the day's stake boost.
type BoostsView struct {
	MinimumZERO string      `json:"minimum_zero"`
	Until       string      `json:"until"`
	Boosts      []BoostView `json:"boosts"`
	Skipped     []SkipView  `json:"skipped"`
}

// BoostView is one boosted account.
type BoostView struct {
	Wallet      string `json:"wallet"`
	Account     string `json:"account"`
	MaturedZERO string `json:"matured_zero"`
}

// TablesView is the keeper's address lookup tables' upkeep.
type TablesView struct {
	Tables    int `json:"tables"`
	Addresses int `json:"addresses"`
	// Missing are addresses the day's transfers will touch that no table
	// holds (after an execution: left for the next run).
	Missing  int `json:"missing"`
	Created  int `json:"created"`
	Extended int `json:"extended"`
}

// PayoutsView is a worker payouts run.
type PayoutsView struct {
	Run string `json:"run"`
	// Sealed: an earlier run fixed the plan; Transfers are the ledger's
	// and Skipped is empty (not computed again).
	Sealed      bool           `json:"sealed"`
	MinimumUSDC string         `json:"minimum_usdc"`
	TotalUSDC   string         `json:"total_usdc"`
	Transfers   []TransferView `json:"transfers"`
	Skipped     []SkipView     `json:"skipped"`
	FeeEstimate *FeesView      `json:"fee_estimate,omitempty"`
	Result      *ResultView    `json:"result,omitempty"`
}

// InflowView is a recorded trading-fee inflow.
type InflowView struct {
	Signature string `json:"signature"`
	Source    string `json:"source"`
	USDC      string `json:"usdc"`
	// Recorded: this run recorded it; RecordedBefore: an earlier one did.
	Recorded       bool `json:"recorded"`
	RecordedBefore bool `json:"recorded_before"`
}

// units6 formats base units of a 6-decimal token (USDC, ZERO).
func units6(v uint64) string { return keeper.USDC(v) }

// sol formats lamports as SOL, with its 9 decimals.
func sol(lamports uint64) string {
	return fmt.Sprintf("%d.%09d", lamports/1_000_000_000, lamports%1_000_000_000)
}

// timeText is t in RFC 3339, or "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// tokenOf names a transfer's mint.
func tokenOf(c onchain.Config, mint string) string {
	switch mint {
	case c.USDCMint.String():
		return "USDC"
	case c.ZeroMint.String():
		return "ZERO"
	}
	return mint
}

func transferViews(c onchain.Config, run string, ts []store.Transfer) []TransferView {
	out := make([]TransferView, 0, len(ts))
	for _, t := range ts {
		v := TransferView{Key: t.Key, Kind: t.Kind, Recipient: t.Recipient, Amount: units6(uint64(max(t.Amount, 0))),
			Token: tokenOf(c, t.Mint), State: string(t.State), Signature: t.Signature, Reason: t.Reason,
			Attempts: t.Attempts, Updated: timeText(t.Updated)}
		if v.State == "" {
			v.State = string(store.TransferPlanned)
		}
		if strings.HasPrefix(run, "earnings/") {
			if account, credits, err := keeper.EarningOf(run, t); err == nil {
				v.Account, v.Credits = account, credits
			}
		}
		out = append(out, v)
	}
	return out
}

// skipContext says which job left someone out: the words differ.
type skipContext int

const (
	skipRewards skipContext = iota
	skipAllowance
	skipBoost
	skipPayouts
)

func skipViews(ss []keeper.Skip, ctx skipContext) []SkipView {
	out := make([]SkipView, 0, len(ss))
	for _, s := range ss {
		v := SkipView{Wallet: s.Wallet, Account: s.Account, Reason: string(s.Reason), Credits: s.Credits,
			LastRequest: timeText(s.LastRequest)}
		owed := units6(keeper.CreditsToUSDC(s.Credits))
		if s.USDC > 0 {
			v.USDC, owed = units6(s.USDC), units6(s.USDC)
		} else if s.Credits > 0 {
			v.USDC = owed
		}
		if s.Stake > 0 {
			v.StakeZERO = units6(s.Stake)
		}
		owedText := owed + " USDC"
		if s.Credits > 0 {
			owedText += fmt.Sprintf(" (%d credits)", s.Credits)
		}
		switch s.Reason {
		case keeper.SkipBelowMinimum:
			v.Detail = fmt.Sprintf("owed %s, below the %s USDC minimum payout: paid once it reaches it", owedText, units6(keeper.MinPayout))
		case keeper.SkipNoPayoutWallet:
			v.Detail = fmt.Sprintf("owed %s and has no payout wallet: paid once one is set (POST /v1/payout-wallet)", owedText)
		case keeper.SkipNoAccount:
			if ctx == skipBoost {
				v.Detail = fmt.Sprintf("holds %s matured ZERO, but no account is paid to this wallet: nothing to boost", v.StakeZERO)
			} else {
				v.Detail = "this staker has no account (it never signed in with this wallet): no allowance to give it"
			}
		case keeper.SkipInactive:
			last := "never"
			if v.LastRequest != "" {
				last = "last " + v.LastRequest
			}
			v.Detail = fmt.Sprintf("its account paid for no request in the last 7 days (%s): no allowance", last)
		case keeper.SkipNotMatured:
			v.Detail = fmt.Sprintf("%s ZERO staked less than 24 h ago: it counts once matured", v.StakeZERO)
		case keeper.SkipRoundsToZero:
			v.Detail = fmt.Sprintf("%s matured ZERO: its share rounds down to 0", v.StakeZERO)
		default:
			v.Detail = string(s.Reason)
		}
		out = append(out, v)
	}
	return out
}

func feesView(est *keeper.FeeEstimate) *FeesView {
	if est == nil {
		return nil
	}
	return &FeesView{Transactions: est.Transactions, ComputeUnits: est.ComputeUnits, PriorityFee: est.PriorityFee,
		SOL: sol(est.Lamports), NewAccounts: est.NewAccounts, UnbuiltSwaps: est.Unbuilt}
}

func resultView(execute bool, r keeper.Result) *ResultView {
	if !execute {
		return nil
	}
	return &ResultView{Confirmed: r.Confirmed, Failed: r.Failed, Transactions: r.Transactions, FeesSOL: sol(r.Fees)}
}

// rewardsView maps a rewards report; est is the dry run's fee estimate.
func rewardsView(c onchain.Config, execute bool, rep keeper.RewardsReport, est *keeper.FeeEstimate) *RewardsView {
	run := "rewards/" + rep.Day
	v := &RewardsView{Run: run, Sealed: rep.Sealed, Stakers: []StakerRewardView{},
		Skipped: skipViews(rep.Skipped, skipRewards), Transfers: transferViews(c, run, rep.Transfers),
		Settle: transferViews(c, "rewards-settle/"+rep.Day, rep.Settle), FeeEstimate: feesView(est),
		Result: resultView(execute, rep.Result)}
	if b := rep.Books; b != nil {
		above := int64(b.TreasuryUSDC) - int64(b.Liabilities) - int64(b.CarriedRewards) - int64(b.Revenue)
		v.Books = &BooksView{TreasuryUSDC: units6(b.TreasuryUSDC), CustomerCreditsUSDC: units6(b.CustomerCredits),
			UnpaidEarningsUSDC: units6(b.UnpaidEarnings), ReserveUSDC: units6(b.Reserved), LiabilitiesUSDC: units6(b.Liabilities),
			CarriedRewardsUSDC: units6(b.CarriedRewards), RevenueCredits: b.RevenueCredits, SplitCredits: b.SplitCredits,
			InflowsUSDC: units6(b.Inflows), RevenueUSDC: units6(b.Revenue), AboveBooksUSDC: units6(uint64(max(above, 0)))}
	}
	if !rep.Sealed {
		p := rep.Plan
		v.Split = &SplitView{SplitUSDC: units6(p.Split), BurnPotUSDC: units6(p.BurnPot), RewardPotUSDC: units6(p.RewardPot),
			CompoundUSDC: units6(p.CompoundUSDC), RemainderUSDC: units6(p.Remainder), MaturedTotalZERO: units6(p.MaturedTotal)}
		matured := map[string]uint64{}
		for _, s := range rep.Stakers {
			matured[s.Owner] = s.Matured
		}
		for _, group := range []struct {
			shares   []keeper.Share
			delivery string
		}{{p.Rewards, "reward_vault"}, {p.Compound, "compound"}} {
			for _, s := range group.shares {
				v.Stakers = append(v.Stakers, StakerRewardView{Owner: s.Owner.String(), MaturedZERO: units6(matured[s.Owner.String()]),
					USDC: units6(s.Amount), Delivery: group.delivery})
			}
		}
	}
	return v
}

// payoutsView maps a payouts report; est is the dry run's fee estimate.
func payoutsView(c onchain.Config, execute bool, rep keeper.PayoutsReport, est *keeper.FeeEstimate) *PayoutsView {
	v := &PayoutsView{Run: rep.Run, Sealed: rep.Sealed, MinimumUSDC: units6(keeper.MinPayout),
		Transfers: transferViews(c, rep.Run, rep.Transfers), Skipped: skipViews(rep.Skipped, skipPayouts),
		FeeEstimate: feesView(est), Result: resultView(execute, rep.Result)}
	var total uint64
	for _, t := range rep.Transfers {
		total += uint64(max(t.Amount, 0))
	}
	v.TotalUSDC = units6(total)
	return v
}

func allowanceView(rep keeper.AllowanceReport) *AllowanceView {
	v := &AllowanceView{Day: rep.Day, PoolCredits: rep.Pool, CapBP: rep.CapBasisPoints, CapCredits: rep.Cap,
		Shares: []AllowanceShareView{}, Reset: append([]string{}, rep.Reset...), Skipped: skipViews(rep.Skipped, skipAllowance)}
	matured := map[string]uint64{}
	for _, s := range rep.Stakers {
		matured[s.Owner] = s.Matured
	}
	for _, s := range rep.Shares {
		v.Shares = append(v.Shares, AllowanceShareView{Account: s.Owner.String(), MaturedZERO: units6(matured[s.Owner.String()]),
			Credits: int64(s.Amount), Capped: rep.Cap > 0 && int64(s.Amount) == rep.Cap})
	}
	return v
}

func boostsView(rep keeper.BoostReport) *BoostsView {
	v := &BoostsView{MinimumZERO: units6(rep.Minimum), Until: timeText(rep.Until), Boosts: []BoostView{},
		Skipped: skipViews(rep.Skipped, skipBoost)}
	for _, b := range rep.Boosts {
		v.Boosts = append(v.Boosts, BoostView{Wallet: b.Wallet, Account: b.Account, MaturedZERO: units6(b.Matured)})
	}
	return v
}

func tablesView(rep keeper.TableReport) *TablesView {
	return &TablesView{Tables: rep.Tables, Addresses: rep.Addresses, Missing: rep.Missing, Created: rep.Created, Extended: rep.Extended}
}

func inflowView(in keeper.Inflow, source string) *InflowView {
	return &InflowView{Signature: in.Signature, Source: source, USDC: units6(in.USDC), Recorded: in.Recorded, RecordedBefore: in.Before}
}
