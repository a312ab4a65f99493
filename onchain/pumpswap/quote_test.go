package pumpswap_test

import (
	"context"
	"fmt"
	"math/big"
	"strings"
	"testing"

	bin "github.com/gagliardetto/binary"
	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/pumpswap"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestQuoteMatchesSDK quotes buys with pumpswap.Market.Quote and with the
// official SDK's buyQuoteInput over what picks the fees — no fee config
// (the global config's), a pool not created by the bonding curve (flat
// fees), a bonding-curve pool quoted in USDC (stable fee tiers, by market
// cap, or the plain tiers where it lists none), in SOL (fee tiers), in
// another token (exotic fees, or flat ones where those are zero), a pool
// with its own creator fee, virtual quote reserves, mayhem mode, no coin
// creator, amounts at the edges of u64 — and requires the same fees and
// the same ZERO to the base unit.
func TestQuoteMatchesSDK(t *testing.T) {
	usdc := solana.MustPublicKeyFromBase58("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")
	zero := key("zero")
	pumpAuthority, _, err := solana.FindProgramAddress([][]byte{[]byte("pool-authority"), zero[:]},
		solana.MustPublicKeyFromBase58("6EF8rrecthR5Dkzon8Nwu78hRvfCKubJ14M5uBEwF6P"))
	if err != nil {
		t.Fatal(err)
	}
	fees := func(lp, protocol, creator uint64) pumpamm.Fees {
		return pumpamm.Fees{LpFeeBps: lp, ProtocolFeeBps: protocol, CreatorFeeBps: creator}
	}
	tier := func(threshold uint64, f pumpamm.Fees) pumpamm.FeeTier {
		return pumpamm.FeeTier{MarketCapLamportsThreshold: bin.Uint128{Lo: threshold}, Fees: f}
	}
	feeConfig := &pumpamm.FeeConfig{
		FlatFees:       fees(25, 5, 0),
		ExoticFlatFees: fees(40, 10, 5),
		FeeTiers:       []pumpamm.FeeTier{tier(0, fees(20, 93, 30)), tier(420_000_000_000, fees(20, 5, 95)), tier(1_470_000_000_000, fees(20, 5, 90))},
		StableFeeTiers: []pumpamm.FeeTier{tier(0, fees(15, 80, 25)), tier(50_000_000_000, fees(15, 5, 60)), tier(300_000_000_000, fees(10, 5, 20))},
	}
	noStable := *feeConfig
	noStable.StableFeeTiers = nil
	noExotic := *feeConfig
	noExotic.ExoticFlatFees = pumpamm.Fees{}
	global := pumpamm.GlobalConfig{LpFeeBasisPoints: 20, ProtocolFeeBasisPoints: 5, CoinCreatorFeeBasisPoints: 5}
	configurable := global
	configurable.CreatorFeeConfigurable = true
	type tc struct {
		name                    string
		global                  pumpamm.GlobalConfig
		fc                      *pumpamm.FeeConfig
		pool                    pumpamm.Pool
		supply, base, quote, in uint64
	}
	pool := func(quoteMint, creator solana.PublicKey, mod func(*pumpamm.Pool)) pumpamm.Pool {
		p := pumpamm.Pool{BaseMint: zero, QuoteMint: quoteMint, Creator: creator, CoinCreator: key("coin creator")}
		if mod != nil {
			mod(&p)
		}
		return p
	}
	const supply = 1_000_000_000_000_000 // a billion ZERO
	cases := []tc{
		{"no fee config", global, nil, pool(usdc, key("someone"), nil), supply, 200_000_000_000_000, 50_000_000_000, 1_000_000_000},
		{"no coin creator: no creator fee", global, nil, pool(usdc, key("someone"), func(p *pumpamm.Pool) { p.CoinCreator = solana.PublicKey{} }), supply, 200_000_000_000_000, 50_000_000_000, 1_000_000_000},
		{"not a bonding-curve pool: flat fees", global, feeConfig, pool(usdc, key("someone"), nil), supply, 200_000_000_000_000, 50_000_000_000, 123_456_789},
		{"USDC, small market cap: first stable tier", global, feeConfig, pool(usdc, pumpAuthority, nil), supply, 800_000_000_000_000, 10_000_000_000, 5_000_000},
		{"USDC, middle tier", global, feeConfig, pool(usdc, pumpAuthority, nil), supply, 200_000_000_000_000, 20_000_000_000, 5_000_000},
		{"USDC, top tier", global, feeConfig, pool(usdc, pumpAuthority, nil), supply, 100_000_000_000_000, 50_000_000_000, 999_999_999},
		{"USDC without stable tiers: the plain tiers", global, &noStable, pool(usdc, pumpAuthority, nil), supply, 100_000_000_000_000, 50_000_000_000, 7},
		{"SOL: fee tiers", global, feeConfig, pool(solana.SolMint, pumpAuthority, nil), supply, 300_000_000_000_000, 140_000_000_000, 3_000_000_000},
		{"another quote token: exotic fees", global, feeConfig, pool(key("other"), pumpAuthority, nil), supply, 300_000_000_000_000, 140_000_000_000, 3_000_000_000},
		{"another quote token, no exotic fees: flat", global, &noExotic, pool(key("other"), pumpAuthority, nil), supply, 300_000_000_000_000, 140_000_000_000, 3_000_000_000},
		{"the pool's own creator fee", configurable, feeConfig, pool(usdc, pumpAuthority, func(p *pumpamm.Pool) { p.CreatorFeeBps = 150 }), supply, 200_000_000_000_000, 20_000_000_000, 5_000_000},
		{"virtual quote reserves", global, feeConfig, pool(usdc, pumpAuthority, func(p *pumpamm.Pool) { p.VirtualQuoteReserves = bin.Int128{Lo: 30_000_000_000} }), supply, 200_000_000_000_000, 20_000_000_000, 5_000_000},
		{"mayhem mode: total supply", global, feeConfig, pool(usdc, pumpAuthority, func(p *pumpamm.Pool) { p.IsMayhemMode = true }), 1_000, 200_000_000_000_000, 20_000_000_000, 5_000_000},
		{"fees round up past the input", global, feeConfig, pool(usdc, pumpAuthority, nil), supply, 1_000_000, 1_000_000, 3},
		{"u64 edges", global, feeConfig, pool(usdc, pumpAuthority, nil), 1<<63 - 1, 1<<64 - 1, 1<<64 - 1, 1<<64 - 1},
	}
	s := func(v uint64) string { return fmt.Sprint(v) }
	jf := func(f pumpamm.Fees) map[string]string {
		return map[string]string{"lp": s(f.LpFeeBps), "protocol": s(f.ProtocolFeeBps), "creator": s(f.CreatorFeeBps)}
	}
	jt := func(ts []pumpamm.FeeTier) []map[string]any {
		out := []map[string]any{}
		for _, t := range ts {
			out = append(out, map[string]any{"threshold": t.MarketCapLamportsThreshold.BigInt().String(), "fees": jf(t.Fees)})
		}
		return out
	}
	var in []map[string]any
	for _, c := range cases {
		var fc any
		if c.fc != nil {
			fc = map[string]any{"flat": jf(c.fc.FlatFees), "exotic": jf(c.fc.ExoticFlatFees), "tiers": jt(c.fc.FeeTiers), "stable_tiers": jt(c.fc.StableFeeTiers)}
		}
		in = append(in, map[string]any{
			"global": map[string]any{"lp": s(c.global.LpFeeBasisPoints), "protocol": s(c.global.ProtocolFeeBasisPoints),
				"creator": s(c.global.CoinCreatorFeeBasisPoints), "creator_fee_configurable": c.global.CreatorFeeConfigurable},
			"fee_config": fc,
			"pool": map[string]any{"base_mint": c.pool.BaseMint.String(), "quote_mint": c.pool.QuoteMint.String(),
				"creator": c.pool.Creator.String(), "coin_creator": c.pool.CoinCreator.String(), "is_mayhem_mode": c.pool.IsMayhemMode,
				"virtual_quote_reserves": c.pool.VirtualQuoteReserves.BigInt().String(), "creator_fee_bps": s(c.pool.CreatorFeeBps)},
			"base_supply": s(c.supply), "base_reserve": s(c.base), "quote_reserve": s(c.quote), "quote_in": s(c.in),
		})
	}
	sdk := svmtest.PumpQuotes(t, in)
	for i, c := range cases {
		m := pumpswap.Market{Pool: c.pool, Global: c.global, FeeConfig: c.fc, BaseSupply: c.supply}
		got, err := m.Quote(c.base, c.quote, c.in)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		q := new(big.Int).Add(new(big.Int).SetUint64(c.quote), c.pool.VirtualQuoteReserves.BigInt())
		f, err := pumpswap.FeesFor(c.global, c.fc, c.pool, c.supply, c.base, q)
		if err != nil {
			t.Fatal(err)
		}
		gotFees := fmt.Sprintf("%d/%d/%d", f.LP, f.Protocol, f.Creator)
		wantFees := sdk[i].Fees.LP + "/" + sdk[i].Fees.Protocol + "/" + sdk[i].Fees.Creator
		want := sdk[i].Base
		if strings.HasPrefix(want, "-") {
			// The SDK subtracts its rounding unit from an input the
			// fees left at nothing and quotes a negative amount: it buys
			// nothing, which we say as 0.
			want = "0"
		}
		if fmt.Sprint(got) != want || gotFees != wantFees {
			t.Errorf("%s: ours %d ZERO at fees %s; the SDK's %s at %s", c.name, got, gotFees, want, wantFees)
		}
	}
}

// TestLoadPoolAndBuyZeroOnSVM: LoadPool reads a pool, the global config,
// the fee config and the ZERO mint from a chain (LiteSVM, the accounts as
// the program stores them), and BuyZero quotes the buy at the pool's
// reserves there: its minimum output is the official SDK's quote for the
// same state less the slippage, and its instructions are the buy of that
// amount. (The PumpSwap program itself cannot run on the test chain.)
func TestLoadPoolAndBuyZeroOnSVM(t *testing.T) {
	ctx := context.Background()
	e := svmtest.NewEnv(t)
	c := e.Config
	owner := svmtest.NewKey(t).PublicKey()
	poolBase := e.MintTo(t, c.ZeroMint, onchain.Token2022Program, owner, 700_000_000_000_000)
	poolQuote := e.MintTo(t, c.USDCMint, onchain.TokenProgram, owner, 40_000_000_000)
	p := pumpamm.Pool{Creator: key("someone"), BaseMint: c.ZeroMint, QuoteMint: c.USDCMint, PoolBaseTokenAccount: poolBase,
		PoolQuoteTokenAccount: poolQuote, CoinCreator: key("coin creator"), CreatorFeeBps: 40}
	var g pumpamm.GlobalConfig
	g.LpFeeBasisPoints, g.ProtocolFeeBasisPoints, g.CoinCreatorFeeBasisPoints, g.CreatorFeeConfigurable = 20, 5, 5, true
	g.ProtocolFeeRecipients[0], g.BuybackFeeRecipients[0] = key("protocol fee"), key("buyback fee")
	fc := pumpamm.FeeConfig{FlatFees: pumpamm.Fees{LpFeeBps: 25, ProtocolFeeBps: 7, CreatorFeeBps: 3}}
	put := func(addr, program solana.PublicKey, disc [8]byte, v interface{ Marshal() ([]byte, error) }) {
		b, err := v.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		e.SetAccount(t, addr, program, append(disc[:], b...))
	}
	poolAddr := key("pool")
	global, _, _ := solana.FindProgramAddress([][]byte{[]byte("global_config")}, pumpswap.Program)
	feeAddr, _, _ := solana.FindProgramAddress([][]byte{[]byte("fee_config"), pumpswap.Program[:]}, pumpswap.FeeProgram)
	put(poolAddr, pumpswap.Program, pumpamm.Account_Pool, p)
	put(global, pumpswap.Program, pumpamm.Account_GlobalConfig, g)
	put(feeAddr, pumpswap.FeeProgram, pumpamm.Account_FeeConfig, fc)

	pool, market, err := pumpswap.LoadPool(ctx, e.RPC, c, poolAddr)
	if err != nil {
		t.Fatal(err)
	}
	if market.FeeConfig == nil || market.BaseSupply != 700_000_000_000_000 || pool.ProtocolFeeRecipient != key("protocol fee") {
		t.Fatalf("loaded %+v, %+v", pool, market)
	}
	const usdcIn, slippage = 2_500_000_000, 100
	sdk := svmtest.PumpQuotes(t, []map[string]any{{
		"global": map[string]any{"lp": "20", "protocol": "5", "creator": "5", "creator_fee_configurable": true},
		"fee_config": map[string]any{"flat": map[string]string{"lp": "25", "protocol": "7", "creator": "3"},
			"exotic": map[string]string{"lp": "0", "protocol": "0", "creator": "0"}, "tiers": []any{}, "stable_tiers": []any{}},
		"pool": map[string]any{"base_mint": c.ZeroMint.String(), "quote_mint": c.USDCMint.String(), "creator": p.Creator.String(),
			"coin_creator": p.CoinCreator.String(), "is_mayhem_mode": false, "virtual_quote_reserves": "0", "creator_fee_bps": "40"},
		"base_supply": "700000000000000", "base_reserve": "700000000000000", "quote_reserve": "40000000000", "quote_in": fmt.Sprint(usdcIn),
	}})
	quoted, ok := new(big.Int).SetString(sdk[0].Base, 10)
	if !ok || sdk[0].Fees.Creator != "40" {
		t.Fatalf("the SDK's quote %+v", sdk[0])
	}
	minOut := quoted.Uint64() * (10_000 - slippage) / 10_000
	s := &pumpswap.Swapper{Pool: pool, Market: market, Reserves: e.Chain, SlippageBasisPoints: slippage}
	keeperKey := key("keeper")
	g0, err := s.BuyZero(ctx, keeperKey, usdcIn)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pumpswap.BuyInstructions(pool, keeperKey, minOut, usdcIn, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(g0.Instructions) != len(want) {
		t.Fatalf("%d instructions, want %d", len(g0.Instructions), len(want))
	}
	for i := range want {
		a, _ := g0.Instructions[i].Data()
		b, _ := want[i].Data()
		if string(a) != string(b) {
			t.Fatalf("instruction %d: %x, want the buy of the SDK's quote %d less 1%%: %x", i, a, minOut, b)
		}
	}
}
