package keepercli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// maxRows bounds each list of the text report: the JSON lists everything.
const maxRows = 50

// Write prints r as text, or with asJSON as one indented JSON document.
func (r Report) Write(w io.Writer, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("print the report: %w", err)
		}
		return nil
	}
	bw := bufio.NewWriter(w)
	r.text(&textWriter{w: bw})
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	return nil
}

// textWriter writes lines; a write error is kept and returned by the
// final flush (bufio keeps it).
type textWriter struct{ w io.Writer }

func (t *textWriter) line(format string, args ...any) { fmt.Fprintf(t.w, format+"\n", args...) }

// table prints rows under header, aligned, at most maxRows of them.
func (t *textWriter) table(header []string, rows [][]string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  "+strings.Join(header, "\t"))
	for i, row := range rows {
		if i == maxRows {
			break
		}
		fmt.Fprintln(tw, "  "+strings.Join(row, "\t"))
	}
	_ = tw.Flush() // a strings.Builder does not fail
	for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		t.line("%s", strings.TrimRight(line, " "))
	}
	if len(rows) > maxRows {
		t.line("  … and %d more (-json lists them all)", len(rows)-maxRows)
	}
}

// count is n and noun, plural unless n is 1.
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "s") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (r Report) text(t *textWriter) {
	what := r.Command
	switch {
	case r.At != "":
		what += ", hour " + r.At
	case r.Day != "":
		what += ", day " + r.Day
	}
	if r.Execute {
		t.line("c0mpute-keeper %s: EXECUTED", what)
	} else {
		t.line("c0mpute-keeper %s: DRY RUN (nothing recorded or sent; -execute runs it)", what)
	}
	access := map[string]string{
		accessReadWrite: "read-write: the run is recorded in it",
		accessReadOnly:  "read-only",
		accessEmpty:     "does not exist yet: planned against an empty ledger, nothing created",
	}[r.Ledger.Access]
	t.line("ledger    %s (%s)", r.Ledger.Store, access)
	tr := r.Treasury
	t.line("treasury  %s (the keeper's wallet)", tr.Wallet)
	if tr.USDCAccountExists {
		t.line("          %s USDC in %s", tr.USDC, tr.USDCAccount)
	} else {
		t.line("          no USDC account yet (%s)", tr.USDCAccount)
	}
	t.line("          %s SOL (pays the fees)", tr.SOL)
	if r.Rewards != nil {
		r.Rewards.text(t)
	}
	if r.Allowance != nil {
		r.Allowance.text(t)
	}
	if r.StakeBoosts != nil {
		r.StakeBoosts.text(t)
	}
	if r.LookupTables != nil {
		lt := r.LookupTables
		t.line("")
		t.line("lookup tables: %s holding %s; %s the day's transfers touch missing", count(lt.Tables, "table"), count(lt.Addresses, "address"), count(lt.Missing, "address"))
		if r.Execute {
			t.line("  created %d, extended %d", lt.Created, lt.Extended)
		}
	}
	if r.Payouts != nil {
		r.Payouts.text(t)
	}
	if r.Inflow != nil {
		in := r.Inflow
		t.line("")
		switch {
		case in.RecordedBefore:
			t.line("inflow %s: recorded before, %s USDC from %s; nothing more to record", in.Signature, in.USDC, in.Source)
		case in.Recorded:
			t.line("inflow %s: recorded %s USDC from %s: the next rewards run splits it", in.Signature, in.USDC, in.Source)
		default:
			t.line("inflow %s: would record %s USDC from %s: the next rewards run would split it", in.Signature, in.USDC, in.Source)
		}
	}
}

func (v *RewardsView) text(t *textWriter) {
	t.line("")
	if v.Sealed {
		t.line("%s: the plan was sealed by an earlier run; the books are not read again", v.Run)
	}
	if b := v.Books; b != nil {
		t.line("books (what %s is computed and checked from)", v.Run)
		t.table([]string{"", "USDC", ""}, [][]string{
			{"treasury", b.TreasuryUSDC, ""},
			{"customers' unspent credits", b.CustomerCreditsUSDC, "kept"},
			{"workers' unpaid earnings", b.UnpaidEarningsUSDC, "kept"},
			{"-reserve", b.ReserveUSDC, "kept"},
			{"liabilities", b.LiabilitiesUSDC, "never split"},
			{"carried reward remainder", b.CarriedRewardsUSDC, "joins the reward pot"},
			{"revenue since the last split", b.RevenueUSDC, fmt.Sprintf("%d credits all time, %d split before; %s USDC of trading-fee inflows",
				b.RevenueCredits, b.SplitCredits, b.InflowsUSDC)},
			{"above the books", b.AboveBooksUSDC, "stays, never split"},
		})
	}
	if s := v.Split; s != nil {
		t.line("")
		t.line("split of %s USDC", s.SplitUSDC)
		t.table([]string{"", "USDC", ""}, [][]string{
			{"buyback and burn", s.BurnPotUSDC, "half"},
			{"staker rewards", s.RewardPotUSDC, fmt.Sprintf("half, plus the carried remainder; over %s matured ZERO", s.MaturedTotalZERO)},
			{"of which auto-compounded", s.CompoundUSDC, "swapped to ZERO and staked"},
			{"remainder carried", s.RemainderUSDC, "to the next day"},
		})
		t.line("")
		t.line("stakers paid: %d", len(v.Stakers))
		if len(v.Stakers) > 0 {
			rows := make([][]string, 0, len(v.Stakers))
			for _, s := range v.Stakers {
				rows = append(rows, []string{s.Owner, s.MaturedZERO, s.USDC, strings.ReplaceAll(s.Delivery, "_", " ")})
			}
			t.table([]string{"STAKER", "MATURED ZERO", "USDC", "TO"}, rows)
		}
	}
	skipsText(t, v.Skipped)
	transfersText(t, "transfers", v.Transfers)
	if len(v.Settle) > 0 {
		transfersText(t, "settle (burn and stake what the swaps returned)", v.Settle)
	} else if !v.Sealed && len(v.Transfers) > 0 && v.Result == nil {
		t.line("  then: burn what the buyback returns, stake what the compound swap returns (planned from the landed swaps)")
	}
	feesText(t, v.FeeEstimate)
	resultText(t, v.Result)
}

func (v *AllowanceView) text(t *textWriter) {
	t.line("")
	t.line("allowance %s: a pool of %d credits, at most %d (%d bp) a staker, by matured stake among active stakers",
		v.Day, v.PoolCredits, v.CapCredits, v.CapBP)
	t.line("stakers given an allowance: %d", len(v.Shares))
	if len(v.Shares) > 0 {
		rows := make([][]string, 0, len(v.Shares))
		for _, s := range v.Shares {
			capped := ""
			if s.Capped {
				capped = "capped"
			}
			rows = append(rows, []string{s.Account, s.MaturedZERO, fmt.Sprint(s.Credits), capped})
		}
		t.table([]string{"ACCOUNT", "MATURED ZERO", "CREDITS", ""}, rows)
	}
	skipsText(t, v.Skipped)
	if len(v.Reset) > 0 {
		t.line("")
		t.line("reset to 0 (an allowance on the 7 days before, none today): %s", strings.Join(v.Reset, ", "))
	}
}

func (v *BoostsView) text(t *textWriter) {
	t.line("")
	t.line("stake boost: accounts paid to a wallet with at least %s matured ZERO, until %s: %d", v.MinimumZERO, v.Until, len(v.Boosts))
	if len(v.Boosts) > 0 {
		rows := make([][]string, 0, len(v.Boosts))
		for _, b := range v.Boosts {
			rows = append(rows, []string{b.Account, b.Wallet, b.MaturedZERO})
		}
		t.table([]string{"ACCOUNT", "WALLET", "MATURED ZERO"}, rows)
	}
	skipsText(t, v.Skipped)
}

func (v *PayoutsView) text(t *textWriter) {
	t.line("")
	if v.Sealed {
		t.line("%s: the plan was sealed by an earlier run", v.Run)
	}
	t.line("run %s: %s, %s USDC in all (at least %s USDC each)", v.Run, count(len(v.Transfers), "payout"), v.TotalUSDC, v.MinimumUSDC)
	if len(v.Transfers) > 0 {
		rows := make([][]string, 0, len(v.Transfers))
		for _, p := range v.Transfers {
			credits := ""
			if p.Credits > 0 {
				credits = fmt.Sprint(p.Credits)
			}
			rows = append(rows, []string{p.Recipient, p.Account, credits, p.Amount, stateText(p)})
		}
		t.table([]string{"PAYOUT WALLET", "ACCOUNT", "CREDITS", "USDC", "STATE"}, rows)
	}
	skipsText(t, v.Skipped)
	feesText(t, v.FeeEstimate)
	resultText(t, v.Result)
}

func skipsText(t *textWriter, ss []SkipView) {
	if len(ss) == 0 {
		return
	}
	t.line("")
	t.line("skipped: %d", len(ss))
	rows := make([][]string, 0, len(ss))
	for _, s := range ss {
		who := s.Wallet
		if s.Account != "" && s.Account != s.Wallet {
			if who == "" {
				who = "account " + s.Account
			} else {
				who += " (account " + s.Account + ")"
			}
		}
		rows = append(rows, []string{who, strings.ReplaceAll(s.Reason, "_", " "), s.Detail})
	}
	t.table([]string{"WHO", "WHY", ""}, rows)
}

func transfersText(t *textWriter, title string, ts []TransferView) {
	t.line("")
	t.line("%s: %d", title, len(ts))
	if len(ts) == 0 {
		return
	}
	rows := make([][]string, 0, len(ts))
	for _, x := range ts {
		rows = append(rows, []string{x.Kind, x.Recipient, x.Amount + " " + x.Token, stateText(x)})
	}
	t.table([]string{"KIND", "RECIPIENT", "AMOUNT", "STATE"}, rows)
}

// stateText is a transfer's state, with its signature and failure reason.
func stateText(x TransferView) string {
	s := x.State
	if x.Signature != "" {
		s += " " + x.Signature
	}
	if x.Reason != "" {
		s += " (" + x.Reason + ")"
	}
	return s
}

func feesText(t *textWriter, f *FeesView) {
	if f == nil || f.Transactions == 0 {
		return
	}
	t.line("")
	t.line("fee estimate: %s, %d compute units at %d micro-lamports per unit: %s SOL",
		count(f.Transactions, "transaction"), f.ComputeUnits, f.PriorityFee, f.SOL)
	if f.NewAccounts > 0 {
		t.line("  plus the rent of %s created on the way (about 0.002 SOL each)", count(f.NewAccounts, "account"))
	}
	if f.UnbuiltSwaps > 0 {
		t.line("  %s counted at a typical swap's compute: no pumpswap_pool configured to build them", count(f.UnbuiltSwaps, "swap"))
	}
}

func resultText(t *textWriter, r *ResultView) {
	if r == nil {
		return
	}
	t.line("")
	t.line("result: %d confirmed, %d failed; %s sent by this run, %s SOL in fees", r.Confirmed, r.Failed, count(r.Transactions, "transaction"), r.FeesSOL)
}
