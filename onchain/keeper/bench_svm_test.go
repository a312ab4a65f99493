package keeper_test

import (
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// BenchmarkKeeperDayOnSVM measures one day's keeper run against the
// LiteSVM harness: read 500 stake accounts, plan, record the ledger, pay
// 500 reward vaults, buy back, burn, and pay 3 workers. The figure is the
// keeper's own cost plus the harness's; a real cluster adds network and
// confirmation time per transaction.
func BenchmarkKeeperDayOnSVM(b *testing.B) {
	e := svmtest.NewEnv(b)
	const stakers = 500
	sent := 0
	for b.Loop() {
		b.StopTimer()
		w := newWorldN(b, e, stakers)
		k := w.keeper(nil)
		before := e.TransactionCount(b)
		b.StartTimer()
		if err := w.day(k); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		sent += e.TransactionCount(b) - before
		b.StartTimer()
	}
	b.ReportMetric(float64(sent)/float64(b.N), "txs/day")
}

// newWorldN is newWorld with n plain stakers.
func newWorldN(b testing.TB, e *svmtest.Env, n int) *world {
	w := newWorld(b, e, false, false)
	for range n {
		o := svmtest.NewKey(b).PublicKey()
		acct := zerostaking.StakeAccount{Owner: o, Bump: 255, Total: 1_000_000,
			Deposits: []zerostaking.Deposit{{Amount: 1_000_000, Time: w.at.Add(-48 * time.Hour).Unix()}}}
		data, err := acct.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		e.SetAccount(b, w.cfg.StakePDA(o), w.cfg.StakingProgram, append(zerostaking.Account_StakeAccount[:], data...))
		w.stakers = append(w.stakers, o)
	}
	return w
}
