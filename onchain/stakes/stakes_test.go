package stakes_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/onchain/stakes"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// anchorStake encodes a stake account with @coral-xyz/anchor from the IDL.
func anchorStake(owner solana.PublicKey, auto bool, deps ...zerostaking.Deposit) svmtest.Case {
	var total uint64
	var ds []any
	for _, d := range deps {
		total += d.Amount
		ds = append(ds, map[string]any{"amount": fmt.Sprint(d.Amount), "time": fmt.Sprint(d.Time)})
	}
	if ds == nil {
		ds = []any{}
	}
	return svmtest.Case{Kind: "account", Name: "StakeAccount", Value: map[string]any{
		"owner": owner.String(), "bump": 255, "autocompound": auto, "total": fmt.Sprint(total), "deposits": ds}}
}

// TestReadOnSVM writes stake accounts encoded by Anchor into the SVM at
// their PDAs, reads them back with getProgramAccounts and the generated
// decoder, and checks matured stake to the base unit at several times.
func TestReadOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	c := e.Config
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	day := int64(24 * 3600)
	a, b, z := svmtest.NewKey(t).PublicKey(), svmtest.NewKey(t).PublicKey(), svmtest.NewKey(t).PublicKey()
	owners := []solana.PublicKey{a, b, z}
	cases := []svmtest.Case{
		// a: one deposit exactly 24 h old (mature), one 1 s short of it.
		anchorStake(a, false, zerostaking.Deposit{Amount: 1_000_000, Time: now.Unix() - day}, zerostaking.Deposit{Amount: 7, Time: now.Unix() - day + 1}),
		// b: auto-compounder, everything old.
		anchorStake(b, true, zerostaking.Deposit{Amount: 18_000_000_000_000, Time: 1}, zerostaking.Deposit{Amount: 3, Time: now.Unix() - 2*day}),
		// z: fully unstaked: an empty account.
		anchorStake(z, false),
	}
	enc := svmtest.Encode(t, svmtest.IDL("zero_staking"), c.StakingProgram.String(), cases)
	for i, o := range owners {
		data, _ := hex.DecodeString(enc[i].Data)
		e.SetAccount(t, c.StakePDA(o), c.StakingProgram, data)
	}
	// An account of another program with the same bytes is not read.
	data, _ := hex.DecodeString(enc[0].Data)
	e.SetAccount(t, svmtest.NewKey(t).PublicKey(), c.RewardsProgram, data)

	all, err := stakes.Read(ctx, e.RPC, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 3 {
		t.Fatalf("read %d stake accounts, want 3", len(all))
	}
	for _, tc := range []struct {
		at   time.Time
		want map[solana.PublicKey]uint64
	}{
		{now, map[solana.PublicKey]uint64{a: 1_000_000, b: 18_000_000_000_003}},
		{now.Add(time.Second), map[solana.PublicKey]uint64{a: 1_000_007, b: 18_000_000_000_003}},
		{now.Add(-time.Second), map[solana.PublicKey]uint64{b: 18_000_000_000_003}},
		{time.Unix(day, 0), map[solana.PublicKey]uint64{}},
		{time.Unix(day+1, 0), map[solana.PublicKey]uint64{b: 18_000_000_000_000}},
	} {
		got := stakes.Matured(all, tc.at)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("matured at %s = %v, want %v", tc.at.UTC(), got, tc.want)
		}
	}
	for _, s := range all {
		if s.Owner == b && !s.Autocompound {
			t.Error("b's autocompound flag lost")
		}
	}

	// A stake account that is not at its owner's PDA is refused.
	e.SetAccount(t, svmtest.NewKey(t).PublicKey(), c.StakingProgram, data)
	if _, err := stakes.Read(ctx, e.RPC, c); err == nil || !strings.Contains(err.Error(), "stake PDA") {
		t.Fatalf("spoofed account: err = %v", err)
	}
}

func TestDecodeRefusesInconsistentAccounts(t *testing.T) {
	owner := solana.PublicKey{1}
	good := zerostaking.StakeAccount{Owner: owner, Total: 5, Deposits: []zerostaking.Deposit{{Amount: 2, Time: 1}, {Amount: 3, Time: 2}}}
	enc := func(a zerostaking.StakeAccount) []byte {
		b, err := a.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return append(zerostaking.Account_StakeAccount[:], b...)
	}
	if _, err := stakes.Decode(enc(good)); err != nil {
		t.Fatalf("good account: %v", err)
	}
	for name, data := range map[string][]byte{
		"wrong total":     enc(zerostaking.StakeAccount{Owner: owner, Total: 6, Deposits: good.Deposits}),
		"empty deposit":   enc(zerostaking.StakeAccount{Owner: owner, Total: 0, Deposits: []zerostaking.Deposit{{}}}),
		"sum overflows":   enc(zerostaking.StakeAccount{Owner: owner, Total: 1, Deposits: []zerostaking.Deposit{{Amount: 1 << 63, Time: 1}, {Amount: 1<<63 + 1, Time: 1}}}),
		"other account":   append([]byte{1, 2, 3, 4, 5, 6, 7, 8}, enc(good)[8:]...),
		"truncated":       enc(good)[:60],
		"huge vec length": append(enc(zerostaking.StakeAccount{Owner: owner})[:50], 0xff, 0xff, 0xff, 0x7f),
		"empty":           nil,
	} {
		if _, err := stakes.Decode(data); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good := zerostaking.StakeAccount{Owner: solana.PublicKey{9}, Total: 3, Deposits: []zerostaking.Deposit{{Amount: 3, Time: 7}}}
	b, _ := good.Marshal()
	f.Add(append(zerostaking.Account_StakeAccount[:], b...))
	f.Add(zerostaking.Account_StakeAccount[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := stakes.Decode(data)
		if err != nil {
			return
		}
		var sum uint64
		for _, d := range s.Deposits {
			sum += d.Amount
		}
		if sum != s.Total {
			t.Fatalf("decoded inconsistent stake %+v", s)
		}
	})
}
