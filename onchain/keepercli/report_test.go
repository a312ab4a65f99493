package keepercli

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the reports")

// key is a fixed, readable address for the golden reports.
func key(b byte) solana.PublicKey { return solana.PublicKey{b, 0xc0} }

var goldenConfig = onchain.Config{StakingProgram: key(1), RewardsProgram: key(2), ZeroMint: key(3), USDCMint: key(4), Treasury: key(5)}

var goldenTreasury = TreasuryView{Wallet: key(5).String(), USDCAccount: goldenConfig.USDCATA(key(5)).String(),
	USDCAccountExists: true, USDC: "1234.567890", SOL: "2.500000000"}

func goldenTransfer(run, kind, recipient string, mint solana.PublicKey, amount int64, state store.TransferState) store.Transfer {
	t := store.Transfer{Key: run + "/" + kind + "/" + recipient, Run: run, Kind: kind, Recipient: recipient, Mint: mint.String(), Amount: amount, State: state}
	if state != store.TransferPlanned && state != "" {
		t.Signature = "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW"
		t.Attempts = 1
		t.Updated = time.Date(2026, 11, 29, 15, 0, 12, 0, time.UTC)
	}
	if state == store.TransferFailed {
		t.Reason = "landed_failed"
	}
	return t
}

// goldenReports are fixed reports of every command, dry run and executed.
func goldenReports() map[string]Report {
	c := goldenConfig
	at := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	rewards := keeper.RewardsReport{Day: "2026-11-29",
		Books: &keeper.Books{TreasuryUSDC: 1_234_567_890, CustomerCredits: 200_000_000, UnpaidEarnings: 35_000_000, Reserved: 5_000_000,
			Liabilities: 240_000_000, CarriedRewards: 3, RevenueCredits: 120_000, SplitCredits: 100_000, Inflows: 1_500_000,
			InflowsTotal: 1_500_000, Revenue: 201_500_000},
		Plan: keeper.RewardPlan{Split: 201_500_000, RewardPot: 100_750_003, BurnPot: 100_750_000,
			Rewards:  []keeper.Share{{Owner: key(10), Amount: 75_562_502}},
			Compound: []keeper.Share{{Owner: key(11), Amount: 25_187_500}}, CompoundUSDC: 25_187_500, Remainder: 1,
			MaturedTotal: 4_000_000_000_000},
		Stakers: []keeper.Staker{{Owner: key(10).String(), Total: 3_000_000_000_000, Matured: 3_000_000_000_000},
			{Owner: key(11).String(), Total: 1_000_000_000_000, Matured: 1_000_000_000_000, Autocompound: true},
			{Owner: key(12).String(), Total: 7_000_000, Matured: 0}},
		Skipped: []keeper.Skip{{Wallet: key(12).String(), Reason: keeper.SkipNotMatured, Stake: 7_000_000}},
	}
	run := "rewards/2026-11-29"
	rewards.Transfers = []store.Transfer{
		goldenTransfer(run, keeper.KindSwap, "buyback", c.USDCMint, 100_750_000, ""),
		goldenTransfer(run, keeper.KindSwap, "compound", c.USDCMint, 25_187_500, ""),
		goldenTransfer(run, keeper.KindReward, key(10).String(), c.USDCMint, 75_562_502, ""),
	}
	fees := &keeper.FeeEstimate{Transactions: 3, ComputeUnits: 460_000, PriorityFee: 10_000, Lamports: 19_600, NewAccounts: 1}
	executed := rewards
	executed.Transfers = []store.Transfer{
		goldenTransfer(run, keeper.KindSwap, "buyback", c.USDCMint, 100_750_000, store.TransferConfirmed),
		goldenTransfer(run, keeper.KindSwap, "compound", c.USDCMint, 25_187_500, store.TransferConfirmed),
		goldenTransfer(run, keeper.KindReward, key(10).String(), c.USDCMint, 75_562_502, store.TransferFailed),
	}
	executed.Settle = []store.Transfer{
		goldenTransfer("rewards-settle/2026-11-29", keeper.KindBurn, key(5).String(), c.ZeroMint, 9_000_000_000, store.TransferConfirmed),
		goldenTransfer("rewards-settle/2026-11-29", keeper.KindStake, key(11).String(), c.ZeroMint, 2_250_000_000, store.TransferConfirmed),
	}
	executed.Result = keeper.Result{Confirmed: 2, Failed: 1, Transactions: 2, Fees: 14_600}

	earnings := keeper.PayoutsReport{Run: "earnings/2026-11-29",
		Transfers: []store.Transfer{goldenTransfer("earnings/2026-11-29", keeper.KindPayout, key(20).String(), c.USDCMint, 1_600_000, "")},
		Skipped: []keeper.Skip{
			{Wallet: key(21).String(), Account: "worker-small", Reason: keeper.SkipBelowMinimum, Credits: 99},
			{Account: "worker-walletless", Reason: keeper.SkipNoPayoutWallet, Credits: 300},
		}}
	earnings.Transfers[0].Key = "earnings/2026-11-29/payout/worker-1"

	allowance := keeper.AllowanceReport{Day: "2026-11-29", Pool: 5000, CapBasisPoints: 2500, Cap: 1250,
		Shares:  []keeper.Share{{Owner: key(10), Amount: 1250}, {Owner: key(13), Amount: 416}},
		Reset:   []string{"former-staker"},
		Stakers: []keeper.Staker{{Owner: key(10).String(), Matured: 3_000_000_000_000}, {Owner: key(13).String(), Matured: 500_000_000_000}},
		Skipped: []keeper.Skip{
			{Wallet: key(11).String(), Account: key(11).String(), Reason: keeper.SkipInactive, Stake: 1_000_000_000_000,
				LastRequest: time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)},
			{Wallet: key(14).String(), Reason: keeper.SkipNoAccount, Stake: 20_000_000},
		}}
	boosts := keeper.BoostReport{Minimum: keeper.DefaultBoostMin, Until: time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC),
		Boosts:  []keeper.Boost{{Wallet: key(10).String(), Account: "contributor", Matured: 3_000_000_000_000, Until: at}},
		Skipped: []keeper.Skip{{Wallet: key(11).String(), Reason: keeper.SkipNoAccount, Stake: 1_000_000_000_000}}}

	dry := func(r Report) Report {
		r.Ledger, r.Treasury = LedgerView{Store: "/var/lib/c0mpute/keeper-ledger.db", Access: accessReadOnly}, goldenTreasury
		return r
	}
	exec := func(r Report) Report {
		r.Execute, r.Ledger, r.Treasury = true, LedgerView{Store: "dynamodb:c0mpute", Access: accessReadWrite}, goldenTreasury
		return r
	}
	sealedPayouts := earnings
	sealedPayouts.Sealed, sealedPayouts.Skipped = true, []keeper.Skip{}
	sealedPayouts.Transfers = []store.Transfer{goldenTransfer("earnings/2026-11-29", keeper.KindPayout, key(20).String(), c.USDCMint, 1_600_000, store.TransferConfirmed)}
	sealedPayouts.Transfers[0].Key = "earnings/2026-11-29/payout/worker-1"
	return map[string]Report{
		"rewards-dry-run": dry(Report{Command: "rewards", Day: "2026-11-29", Rewards: rewardsView(c, false, rewards, fees)}),
		"rewards-execute": exec(Report{Command: "rewards", Day: "2026-11-29", Rewards: rewardsView(c, true, executed, nil)}),
		"rewards-sealed": dry(Report{Command: "rewards", Day: "2026-11-29", Rewards: rewardsView(c, false,
			keeper.RewardsReport{Day: "2026-11-29", Sealed: true, Transfers: executed.Transfers, Stakers: []keeper.Staker{}, Skipped: []keeper.Skip{}}, &keeper.FeeEstimate{})}),
		"allowance-dry-run": dry(Report{Command: "allowance", Day: "2026-11-29", Allowance: allowanceView(allowance),
			StakeBoosts: boostsView(boosts), LookupTables: tablesView(keeper.TableReport{Tables: 1, Addresses: 40, Missing: 12})}),
		"payouts-dry-run": dry(Report{Command: "payouts", Day: "2026-11-29", Payouts: payoutsView(c, false, earnings,
			&keeper.FeeEstimate{Transactions: 1, ComputeUnits: 50_000, PriorityFee: 10_000, Lamports: 5_500, NewAccounts: 1})}),
		"payouts-empty-ledger": func() Report {
			r := dry(Report{Command: "requested-payouts", At: "2026-11-29T07:00:00Z", Payouts: payoutsView(c, false,
				keeper.PayoutsReport{Run: "earnings/2026-11-29/requested-07", Transfers: []store.Transfer{}, Skipped: []keeper.Skip{}}, &keeper.FeeEstimate{})})
			r.Ledger.Access = accessEmpty
			r.Treasury.USDCAccountExists, r.Treasury.USDC = false, "0.000000"
			return r
		}(),
		"payouts-execute": exec(Report{Command: "payouts", Day: "2026-11-29", Payouts: payoutsView(c, true, sealedPayouts,
			nil)}),
		"inflow-dry-run": dry(Report{Command: "inflow", Inflow: inflowView(keeper.Inflow{Signature: "5VERv8NMvzbJMEkV8xnrLkEaWRtSz9CosKDYjCJjBRnbJLgp8uirBgmQpjKhoR4tjF3ZpRzrFmBV6UjKdiSZkQUW",
			USDC: 1_500_000}, key(30).String())}),
	}
}

// TestReportGolden: each report, as text and as JSON, is its golden file
// (go test ./onchain/keepercli -run Golden -update rewrites them).
func TestReportGolden(t *testing.T) {
	for name, rep := range goldenReports() {
		for _, form := range []struct {
			ext    string
			asJSON bool
		}{{"txt", false}, {"json", true}} {
			t.Run(name+"."+form.ext, func(t *testing.T) {
				var b bytes.Buffer
				if err := rep.Write(&b, form.asJSON); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join("testdata", name+"."+form.ext+".golden")
				if *update {
					if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (go test -run Golden -update writes it)", err)
				}
				if !bytes.Equal(b.Bytes(), want) {
					t.Errorf("%s differs from the report:\n%s", path, b.String())
				}
			})
		}
	}
}

// TestReportJSONIsStable: the JSON has no null lists, no zero times, and
// decodes back into Report with nothing unknown.
func TestReportJSONIsStable(t *testing.T) {
	for name, rep := range goldenReports() {
		var b bytes.Buffer
		if err := rep.Write(&b, true); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{`": null`, "0001-01-01", `"Confirmed"`} {
			if bytes.Contains(b.Bytes(), []byte(bad)) && !(bad == `": null` && rep.Rewards != nil && rep.Rewards.Sealed) {
				t.Errorf("%s: the JSON holds %s:\n%s", name, bad, b.String())
			}
		}
		dec := json.NewDecoder(&b)
		dec.DisallowUnknownFields()
		var back Report
		if err := dec.Decode(&back); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
