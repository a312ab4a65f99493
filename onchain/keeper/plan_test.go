package keeper

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

var at = time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)

func stake(id byte, auto bool, amounts ...uint64) stakes.Stake {
	s := stakes.Stake{Owner: solana.PublicKey{id}, Autocompound: auto}
	for _, a := range amounts {
		s.Deposits = append(s.Deposits, zerostaking.Deposit{Amount: a, Time: at.Unix() - 86400})
		s.Total += a
	}
	return s
}

func TestPlanRewards(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   RewardInputs
		want string
	}{
		{"odd split: the extra unit burns; remainder carried",
			RewardInputs{At: at, Revenue: 1001, TreasuryUSDC: 1001, Stakes: []stakes.Stake{stake(1, false, 1), stake(2, false, 1), stake(3, false, 1)}},
			"split=1001 pot=500 burn=501 rewards=[166 166 166] compound=[] rem=2"},
		{"carried remainder joins the pot whole; liabilities are never split",
			RewardInputs{At: at, Revenue: 1000, TreasuryUSDC: 1000 + 2 + 300, Liabilities: 300, CarriedRewards: 2, Stakes: []stakes.Stake{stake(1, false, 1), stake(2, true, 3)}},
			"split=1000 pot=502 burn=500 rewards=[125] compound=[376] rem=1"},
		{"no matured stake: the whole pot carries",
			RewardInputs{At: at, Revenue: 10, TreasuryUSDC: 10, Stakes: []stakes.Stake{{Owner: solana.PublicKey{9}, Total: 5, Deposits: []zerostaking.Deposit{{Amount: 5, Time: at.Unix()}}}}},
			"split=10 pot=5 burn=5 rewards=[] compound=[] rem=5"},
		{"the split is the revenue, never the balance: deposits and donations stay",
			RewardInputs{At: at, Revenue: 40, TreasuryUSDC: 1_000_000, Liabilities: 900, Stakes: []stakes.Stake{stake(1, false, 1)}},
			"split=40 pot=20 burn=20 rewards=[20] compound=[] rem=0"},
		{"no revenue: nothing splits",
			RewardInputs{At: at, TreasuryUSDC: 10, Liabilities: 10, Stakes: []stakes.Stake{stake(1, false, 1)}},
			"split=0 pot=0 burn=0 rewards=[] compound=[] rem=0"},
		{"huge stake and pot: exact, no overflow",
			RewardInputs{At: at, Revenue: 1 << 62, TreasuryUSDC: 1 << 62, Stakes: []stakes.Stake{stake(1, false, 1<<62), stake(2, false, 1<<61, 1<<61, 1)}},
			"split=4611686018427387904 pot=2305843009213693952 burn=2305843009213693952 rewards=[1152921504606846975 1152921504606846976] compound=[] rem=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanRewards(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			amounts := func(ss []Share) []uint64 {
				out := []uint64{}
				for _, s := range ss {
					out = append(out, s.Amount)
				}
				return out
			}
			got := fmt.Sprintf("split=%d pot=%d burn=%d rewards=%v compound=%v rem=%d", p.Split, p.RewardPot, p.BurnPot, amounts(p.Rewards), amounts(p.Compound), p.Remainder)
			if got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			var sum uint64
			for _, s := range append(p.Rewards, p.Compound...) {
				sum += s.Amount
			}
			if sum+p.Remainder != p.RewardPot || p.RewardPot+p.BurnPot != p.Split+tc.in.CarriedRewards {
				t.Fatalf("does not reconcile: %+v", p)
			}
		})
	}
	// The treasury must hold what it owes, the carry and the split.
	for _, in := range []RewardInputs{
		{TreasuryUSDC: 1, CarriedRewards: 2},
		{TreasuryUSDC: 100, Liabilities: 90, Revenue: 11},
		{TreasuryUSDC: 100, Liabilities: 50, CarriedRewards: 40, Revenue: 11},
		{TreasuryUSDC: math.MaxUint64, Liabilities: math.MaxUint64, Revenue: 1},
	} {
		_, err := PlanRewards(in)
		var short *ShortfallError
		if !errors.As(err, &short) || short.Treasury != in.TreasuryUSDC || short.Split != in.Revenue {
			t.Errorf("PlanRewards(%+v) = %v; want a shortfall", in, err)
		}
	}
	if _, err := PlanRewards(RewardInputs{TreasuryUSDC: 100, Liabilities: 50, CarriedRewards: 39, Revenue: 11}); err != nil {
		t.Errorf("a treasury holding exactly what it owes and splits: %v", err)
	}
	want := "keeper: the treasury holds 1.000000 USDC, less than it owes (0.900000) plus carried rewards (0.000001) plus today's split (0.150000): refusing to split"
	if got := (&ShortfallError{Treasury: 1_000_000, Liabilities: 900_000, CarriedRewards: 1, Split: 150_000}).Error(); got != want {
		t.Errorf("shortfall reads\n%s\nwant\n%s", got, want)
	}
}

func TestPlanCompound(t *testing.T) {
	shares, rem := PlanCompound(100, 1, []Share{{Owner: solana.PublicKey{1}, Amount: 1}, {Owner: solana.PublicKey{2}, Amount: 2}})
	if len(shares) != 2 || shares[0].Amount != 33 || shares[1].Amount != 67 || rem != 1 {
		t.Fatalf("shares %v, remainder %d", shares, rem)
	}
}

func TestPlanAllowance(t *testing.T) {
	all := []stakes.Stake{stake(1, false, 90), stake(2, false, 5), stake(3, false, 5), stake(4, false, 1000)}
	shares, err := PlanAllowance(AllowanceInputs{At: at, Stakes: all, Pool: 5000, CapBasisPoints: 2500,
		Active: func(o solana.PublicKey) bool { return o != solana.PublicKey{4} }})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(shares[0].Amount, shares[1].Amount, shares[2].Amount, len(shares))
	if got != "1250 250 250 3" {
		t.Fatalf("allowance = %s; want the big staker capped at 25%%, the inactive one left out", got)
	}
	if _, err := PlanAllowance(AllowanceInputs{Pool: 1, CapBasisPoints: 10_001}); err == nil {
		t.Fatal("cap above 100% accepted")
	}
}

func TestPlanPayouts(t *testing.T) {
	got := PlanPayouts([]Share{{Owner: solana.PublicKey{2}, Amount: MinPayout}, {Owner: solana.PublicKey{1}, Amount: MinPayout - 1}}, MinPayout)
	if len(got) != 1 || got[0].Amount != MinPayout {
		t.Fatalf("payouts %v", got)
	}
	if CreditsToUSDC(150) != 1_500_000 {
		t.Fatal("150 credits is $1.50")
	}
}

func TestStakeSkips(t *testing.T) {
	a, b, c, d := solana.PublicKey{1}, solana.PublicKey{2}, solana.PublicKey{3}, solana.PublicKey{4}
	all := stakersAt([]stakes.Stake{
		stake(1, false, 100),
		{Owner: b, Total: 5, Deposits: []zerostaking.Deposit{{Amount: 5, Time: at.Unix()}}}, // deposited now
		stake(3, false, 1),
		stake(4, false, 50),
		{Owner: solana.PublicKey{5}}, // unstaked everything: not listed
	}, at)
	if all[1].Owner != b.String() || all[1].Matured != 0 || all[1].Total != 5 {
		t.Fatalf("stakers %+v", all)
	}
	got := stakeSkips(all, []Share{{Owner: a, Amount: 10}}, map[string]bool{d.String(): true})
	want := []Skip{{Wallet: c.String(), Reason: SkipRoundsToZero, Stake: 1}, {Wallet: b.String(), Reason: SkipNotMatured, Stake: 5}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("skips %+v\nwant  %+v", got, want)
	}
}
