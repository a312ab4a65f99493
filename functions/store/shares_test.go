package store_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
)

func TestCheckShares(t *testing.T) {
	sh := func(account, pubkey string, amount int64) store.Share {
		return store.Share{Account: account, Pubkey: pubkey, Amount: amount}
	}
	most := make([]store.Share, store.MaxShares)
	for i := range most {
		most[i] = sh(fmt.Sprint("a", i), fmt.Sprint("pk", i), 1)
	}
	over := append(append([]store.Share{}, most...), sh("a", "pk", 0))
	long := strings.Repeat("x", 129)
	for _, tc := range []struct {
		name    string
		earning int64
		shares  []store.Share
		err     string // a part of the error; "" for none
	}{
		{"none", 5, nil, ""},
		{"exact", 7, []store.Share{sh("a", "pk1", 3), sh("b", "pk2", 4)}, ""},
		{"zero share", 7, []store.Share{sh("a", "pk1", 7), sh("b", "pk2", 0)}, ""},
		{"all zero", 0, []store.Share{sh("a", "pk1", 0)}, ""},
		{"one account twice", 7, []store.Share{sh("a", "pk1", 3), sh("a", "pk1", 4)}, ""},
		{"the most", store.MaxShares, most, ""},
		{"too many", store.MaxShares, over, "33 shares, at most 32"},
		{"below", 8, []store.Share{sh("a", "pk1", 3), sh("b", "pk2", 4)}, "add up to 7, the earning is 8"},
		{"above", 6, []store.Share{sh("a", "pk1", 3), sh("b", "pk2", 4)}, "more than the earning 6 by share 1"},
		{"negative", 7, []store.Share{sh("a", "pk1", -1), sh("b", "pk2", 8)}, "share 0 (account a) is negative"},
		{"no account", 7, []store.Share{sh("", "pk1", 7)}, "share 0 (identity \"pk1\") names no account"},
		{"no identity", 7, []store.Share{sh("a", "", 7)}, "share 0 (account a) names no identity"},
		{"long account", 7, []store.Share{sh(long, "pk1", 7)}, "longer than 128 bytes"},
		{"long identity", 7, []store.Share{sh("a", long, 7)}, "longer than 128 bytes"},
		{"overflow", 10, []store.Share{sh("a", "pk1", math.MaxInt64), sh("b", "pk2", math.MaxInt64)}, "more than the earning"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Completion{JobID: "j", Earning: tc.earning, Shares: tc.shares}.CheckShares()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("CheckShares: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("CheckShares: %v, want an error with %q", err, tc.err)
			}
		})
	}
}

func TestRingShareEntry(t *testing.T) {
	j := store.Job{ID: "job-1", WorkerAccount: "coord"}
	when := date("2031-03-14T12:00:00.5+01:00")
	for _, tc := range []struct {
		i    int
		sh   store.Share
		want store.Entry
	}{
		{0, store.Share{Account: "a", Pubkey: "pkA", Amount: 5}, store.Entry{AccountID: "a",
			ID: "2031-03-14T11:00:00.500000000Z#earning#job-1#00#pkA", Kind: store.EntryEarning, Credits: 5, JobID: "job-1"}},
		{12, store.Share{Account: "b", Pubkey: "pkB", Amount: 0}, store.Entry{AccountID: "b",
			ID: "2031-03-14T11:00:00.500000000Z#earning#job-1#12#pkB", Kind: store.EntryEarning, JobID: "job-1"}},
	} {
		e := store.RingShareEntry(j, tc.i, tc.sh, when)
		tc.want.At = when.UTC()
		if e != tc.want {
			t.Errorf("RingShareEntry(%d, %+v) =\n %+v, want\n %+v", tc.i, tc.sh, e, tc.want)
		}
		if e.Moves() != (tc.sh.Amount != 0) {
			t.Errorf("share of %d moves: %v", tc.sh.Amount, e.Moves())
		}
	}
	// Unique per share, whatever the shares hold; never the plain
	// earning's id.
	a := store.RingShareEntry(j, 0, store.Share{Account: "a", Pubkey: "pk", Amount: 1}, when)
	b := store.RingShareEntry(j, 1, store.Share{Account: "a", Pubkey: "pk", Amount: 1}, when)
	plain := store.EarningEntry(store.Job{ID: "job-1", WorkerAccount: "a"}, 2, when)
	if a.ID == b.ID || a.ID == plain.ID || b.ID == plain.ID {
		t.Errorf("entry ids collide: %s, %s, %s", a.ID, b.ID, plain.ID)
	}
}

func TestIdentityEarning(t *testing.T) {
	c := store.Completion{Earning: 10}
	if got := c.IdentityEarning("a", "pk"); got != 10 {
		t.Errorf("without shares: %d, want all 10", got)
	}
	c.Shares = []store.Share{{Account: "a", Pubkey: "pk", Amount: 3}, {Account: "b", Pubkey: "pk", Amount: 2},
		{Account: "a", Pubkey: "pk2", Amount: 1}, {Account: "a", Pubkey: "pk", Amount: 4}}
	for _, tc := range []struct {
		account, pubkey string
		want            int64
	}{{"a", "pk", 7}, {"b", "pk", 2}, {"a", "pk2", 1}, {"c", "pk", 0}} {
		if got := c.IdentityEarning(tc.account, tc.pubkey); got != tc.want {
			t.Errorf("IdentityEarning(%s, %s) = %d, want %d", tc.account, tc.pubkey, got, tc.want)
		}
	}
}
