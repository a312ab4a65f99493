package onchain_test

import (
	"fmt"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// fundGroups is one fund instruction per staker, as the keeper sends them.
func fundGroups(b *testing.B, n int) (solana.PublicKey, []onchain.Group, []solana.PublicKey) {
	keeper := key("keeper")
	var groups []onchain.Group
	var unique []solana.PublicKey
	for i := range n {
		owner := key(fmt.Sprint("staker", i))
		ix, err := idlConfig.Fund(keeper, idlConfig.USDCATA(keeper), owner, uint64(1000+i))
		if err != nil {
			b.Fatal(err)
		}
		groups = append(groups, onchain.Group{Instructions: []solana.Instruction{ix}, ComputeUnits: 60_000})
		unique = append(unique, owner, idlConfig.RewardPDA(owner), idlConfig.RewardVault(owner))
	}
	return keeper, groups, unique
}

// BenchmarkFund10000Stakers reports how many transactions and how many
// lamports of fees it takes to fund 10,000 reward vaults: legacy
// transactions, and v0 transactions with address lookup tables holding
// every staker's three addresses (the tables' own creation and extension
// transactions counted).
func BenchmarkFund10000Stakers(b *testing.B) {
	const stakers = 10_000
	const microLamports = 10_000 // a typical priority fee
	keeper, groups, unique := fundGroups(b, stakers)
	for _, mode := range []string{"legacy", "v0+ALT"} {
		b.Run(mode, func(b *testing.B) {
			var tables onchain.Tables
			setupTxs := 0
			if mode == "v0+ALT" {
				tables = onchain.Tables{}
				shared := solana.PublicKeySlice{idlConfig.RewardsProgram, idlConfig.USDCMint, idlConfig.USDCATA(keeper),
					onchain.TokenProgram, onchain.ATAProgram, onchain.SystemProgram}
				all := append(shared, unique...)
				for i := 0; i < len(all); i += 256 {
					tables[key(fmt.Sprint("table", i))] = all[i:min(i+256, len(all))]
					// One create, then extends of at most 30 addresses
					// each (a transaction's size limit).
					setupTxs += 1 + (min(i+256, len(all))-i+29)/30
				}
			}
			var batches [][]int
			for b.Loop() {
				var err error
				// Each transaction may load from every table; packing
				// looks the needed ones up.
				batches, err = packWithTables(keeper, groups, microLamports, tables)
				if err != nil {
					b.Fatal(err)
				}
			}
			var fees uint64
			for _, bt := range batches {
				fees += onchain.Fees{ComputeUnits: uint32(60_000 * len(bt)), MicroLamportsPerCU: microLamports}.LamportsFor(1)
			}
			setupFees := uint64(setupTxs) * onchain.Fees{ComputeUnits: 10_000, MicroLamportsPerCU: microLamports}.LamportsFor(1)
			b.ReportMetric(float64(len(batches)), "fund-txs")
			b.ReportMetric(float64(stakers)/float64(len(batches)), "stakers/tx")
			b.ReportMetric(float64(setupTxs), "table-txs")
			b.ReportMetric(float64(fees+setupFees)/1e9, "SOL-fees")
		})
	}
}

// packWithTables packs groups, giving each candidate transaction only the
// tables it uses (a v0 message lists only the tables it loads from).
func packWithTables(payer solana.PublicKey, groups []onchain.Group, price uint64, tables onchain.Tables) ([][]int, error) {
	fees := onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: price}
	if len(tables) == 0 {
		return onchain.Pack(payer, groups, fees, nil)
	}
	// Shared addresses sit in the first table; staker i's in the table
	// holding index 6+3i.
	var out [][]int
	const perTable = 256
	var keys []solana.PublicKey
	for k := range tables {
		keys = append(keys, k)
	}
	byStart := map[int]solana.PublicKey{}
	for i := 0; i < len(groups)*3+6; i += perTable {
		byStart[i] = key(fmt.Sprint("table", i))
	}
	start := 0
	for start < len(groups) {
		// Tables for a window of stakers starting at start.
		sub := onchain.Tables{}
		for j := start; j < min(start+100, len(groups)); j++ {
			t := byStart[((6+3*j)/perTable)*perTable]
			sub[t] = tables[t]
		}
		sub[byStart[0]] = tables[byStart[0]]
		bs, err := onchain.Pack(payer, groups[start:min(start+100, len(groups))], fees, sub)
		if err != nil {
			return nil, err
		}
		first := bs[0]
		for i := range first {
			first[i] += start
		}
		out = append(out, first)
		start += len(first)
	}
	return out, nil
}
