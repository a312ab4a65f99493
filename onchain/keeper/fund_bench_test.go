package keeper_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/zerorewards"
	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// allExist answers GetMultipleAccounts as a cluster where every account
// asked for exists: the steady state, after each staker's first reward.
// It is the only stand-in here; the packing, the tables' contents and the
// transactions are the shipped code's.
type allExist struct{}

func (allExist) GetMultipleAccountsWithOpts(_ context.Context, accounts []solana.PublicKey, _ *rpc.GetMultipleAccountsOpts) (*rpc.GetMultipleAccountsResult, error) {
	out := &rpc.GetMultipleAccountsResult{Value: make([]*rpc.Account, len(accounts))}
	for i := range out.Value {
		out.Value[i] = &rpc.Account{}
	}
	return out, nil
}

func benchKey(label string) solana.PublicKey {
	h := sha256.Sum256([]byte(label))
	return solana.PublicKeyFromBytes(h[:])
}

// BenchmarkFund10000Stakers reports what the shipped keeper sends to fund
// 10,000 stakers' reward vaults (DeliverFund, as in production) at a
// 10,000 µlamport/CU priority fee: legacy transactions, and v0 ones
// through the lookup tables EnsureTables fills (TableAddresses, 256 a
// table), on the first day (every vault made by its fund: more
// instructions each) and every day after (vaults exist). Packing is
// onchain.Pack's, under the size, compute, instruction-trace and
// account-lock limits; the tables' one-time transactions and rent are
// counted as EnsureTables makes them.
func BenchmarkFund10000Stakers(b *testing.B) {
	const stakers = 10_000
	const microLamports = 10_000
	cfg := onchain.Config{StakingProgram: zerostaking.ProgramID, RewardsProgram: zerorewards.ProgramID,
		ZeroMint: benchKey("zero"), USDCMint: benchKey("usdc")}
	kp, err := solana.NewRandomPrivateKey()
	if err != nil {
		b.Fatal(err)
	}
	var all []stakes.Stake
	var ts []store.Transfer
	for i := range stakers {
		o := benchKey(fmt.Sprint("staker", i))
		all = append(all, stakes.Stake{Owner: o, Total: 1})
		ts = append(ts, store.Transfer{Key: fmt.Sprint("r/", i), Kind: keeper.KindReward, Recipient: o.String(),
			Mint: cfg.USDCMint.String(), Amount: int64(1000 + i)})
	}
	for _, mode := range []struct {
		name   string
		tables bool
		steady bool
	}{{"legacy/first-day", false, false}, {"legacy/daily", false, true}, {"v0+ALT/first-day", true, false}, {"v0+ALT/daily", true, true}} {
		b.Run(mode.name, func(b *testing.B) {
			k := &keeper.Keeper{Config: cfg, Exec: &keeper.Executor{Keeper: kp}}
			if mode.steady {
				k.AccountsRPC = allExist{}
				if err := k.Prepare(context.Background(), ts); err != nil {
					b.Fatal(err)
				}
			}
			groups := make([]onchain.Group, len(ts))
			for i, t := range ts {
				g, err := k.Build(context.Background(), t)
				if err != nil {
					b.Fatal(err)
				}
				groups[i] = g
			}
			var tables onchain.Tables
			var setupTxs, rent uint64
			if mode.tables {
				tables = onchain.Tables{}
				addrs := k.TableAddresses(all, nil)
				for i := 0; i < len(addrs); i += onchain.MaxTableAddresses {
					n := min(onchain.MaxTableAddresses, len(addrs)-i)
					tables[benchKey(fmt.Sprint("table", i))] = addrs[i : i+n]
					setupTxs += 1 + uint64((n+onchain.MaxExtend-4)/(onchain.MaxExtend-3))
					// Rent-exempt minimum: (128 + 56 + 32n bytes) at
					// 6,960 lamports a byte.
					rent += uint64(128+56+32*n) * 6960
				}
			}
			var batches [][]int
			for b.Loop() {
				var err error
				if batches, err = onchain.Pack(kp.PublicKey(), groups, onchain.Fees{ComputeUnits: 1, MicroLamportsPerCU: microLamports}, tables); err != nil {
					b.Fatal(err)
				}
			}
			var fees uint64
			for _, bt := range batches {
				var units uint32
				for _, i := range bt {
					units += groups[i].ComputeUnits
				}
				fees += onchain.Fees{ComputeUnits: units, MicroLamportsPerCU: microLamports}.LamportsFor(1)
			}
			setupFees := setupTxs * onchain.Fees{ComputeUnits: 100_000, MicroLamportsPerCU: microLamports}.LamportsFor(1)
			b.ReportMetric(float64(len(batches)), "fund-txs")
			b.ReportMetric(float64(stakers)/float64(len(batches)), "stakers/tx")
			b.ReportMetric(float64(fees)/1e9, "SOL/day")
			b.ReportMetric(float64(setupTxs), "table-txs")
			b.ReportMetric(float64(setupFees)/1e9, "SOL-table-fees")
			b.ReportMetric(float64(rent)/1e9, "SOL-table-rent")
		})
	}
}
