package keeper_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestStakeBoostsOnSVM: the boost reaches exactly the accounts whose payout
// wallet holds the minimum of matured stake on the chain — a sign-in
// account paid to itself and an account that proved the wallet — until the
// next day's start plus the grace; a wallet below the minimum, or an
// account paid elsewhere, gets nothing, a dry run writes nothing, and a
// boost nobody renews has lapsed the day after.
func TestStakeBoostsOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	w := newWorld(t, e, false, false)
	// The stakers' matured stake: 1,000,000, 3,333,333, 7 and 5×10^10.
	small, big, huge := w.stakers[0], w.stakers[1], w.stakers[3]
	account := func(id, wallet string) {
		t.Helper()
		if err := w.ledger.CreateAccount(ctx, store.Account{ID: id, Wallet: id, CreatedAt: w.at}); err != nil {
			t.Fatal(err)
		}
		if wallet != id {
			if _, err := w.ledger.SetWallet(ctx, id, wallet); err != nil {
				t.Fatal(err)
			}
		}
	}
	account(big.String(), big.String())      // signed in with its staking wallet
	account("contributor", huge.String())    // proved the staking wallet
	account(small.String(), small.String())  // below the minimum
	account(huge.String(), "somewhere-else") // the wallet's own account pays elsewhere
	k := w.keeper(nil)
	k.Accounts = w.ledger

	boosts, err := k.StakeBoosts(ctx, w.at, 3_000_000, false)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, b := range boosts {
		ids = append(ids, b.Account)
	}
	if want := []string{big.String(), "contributor"}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Fatalf("boosted %v, want %v", ids, want)
	}
	if a, _ := w.ledger.GetAccount(ctx, "contributor"); !a.StakeBoostUntil.IsZero() {
		t.Fatalf("a dry run boosted: %+v", a)
	}
	if _, err := k.StakeBoosts(ctx, w.at, 3_000_000, true); err != nil {
		t.Fatal(err)
	}
	until := w.at.Truncate(24 * time.Hour).Add(26 * time.Hour)
	for _, id := range []string{big.String(), "contributor", small.String(), huge.String()} {
		a, err := w.ledger.GetAccount(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := id == big.String() || id == "contributor"
		if a.Boosted(w.at) != want || want && !a.StakeBoostUntil.Equal(until) {
			t.Errorf("%s boosted until %v at %v; want boosted %v (until %v)", id, a.StakeBoostUntil, w.at, want, until)
		}
		if a.Boosted(w.at.AddDate(0, 0, 1).Add(12 * time.Hour)) {
			t.Errorf("%s still boosted a day later without a renewal", id)
		}
	}
	if _, err := (&keeper.Keeper{}).StakeBoosts(ctx, w.at, 1, false); err == nil {
		t.Error("a keeper without accounts boosted")
	}
}
