package pumpswap_test

import (
	"testing"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
)

// FuzzParseAccounts feeds arbitrary bytes to the generated decoders
// LoadPool runs on the pool, global config and fee config accounts read
// from the network: an error, never a panic.
func FuzzParseAccounts(f *testing.F) {
	pool := pumpamm.Pool{BaseMint: key("zero"), QuoteMint: key("usdc"), CoinCreator: key("creator"), IsCashbackCoin: true}
	if b, err := pool.Marshal(); err == nil {
		f.Add(append(pumpamm.Account_Pool[:], b...))
	}
	var g pumpamm.GlobalConfig
	g.ProtocolFeeRecipients[0] = key("fee")
	if b, err := g.Marshal(); err == nil {
		f.Add(append(pumpamm.Account_GlobalConfig[:], b...))
	}
	fc := pumpamm.FeeConfig{FeeTiers: []pumpamm.FeeTier{{Fees: pumpamm.Fees{LpFeeBps: 20}}}}
	if b, err := fc.Marshal(); err == nil {
		f.Add(append(pumpamm.Account_FeeConfig[:], b...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = pumpamm.ParseAccount_Pool(data)
		_, _ = pumpamm.ParseAccount_GlobalConfig(data)
		_, _ = pumpamm.ParseAccount_FeeConfig(data)
	})
}
