package pumpswap

import (
	"errors"
	"math/big"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/pumpamm"
)

// The quote of a buy, computed as the official SDK computes it
// (@pump-fun/pump-swap-sdk's computeFeesBps and buyQuoteInput), so that
// the keeper's minimum output is the SDK's to the base unit:
// TestQuoteMatchesSDK holds them together over fee tiers, flat and exotic
// fees, a creator's own fee, virtual reserves and pools without a creator.

// Fees are a pool's fees on a trade, in basis points.
type Fees struct {
	LP, Protocol, Creator uint64
}

// Total is the fees a trade pays: the creator's only when the pool has a
// coin creator.
func (f Fees) Total(coinCreator solana.PublicKey) uint64 {
	t := f.LP + f.Protocol
	if !coinCreator.IsZero() {
		t += f.Creator
	}
	return t
}

var (
	// pumpProgram is the bonding-curve program whose pool authority
	// creates "pump" pools (the SDK's PUMP_PROGRAM_ID).
	pumpProgram = solana.MustPublicKeyFromBase58("6EF8rrecthR5Dkzon8Nwu78hRvfCKubJ14M5uBEwF6P")
	// usdcMainnet is the SDK's one stable quote mint.
	usdcMainnet = solana.MustPublicKeyFromBase58("EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v")
	solLike     = []solana.PublicKey{{}, solana.SolMint, solana.MustPublicKeyFromBase58("9pan9bMn5HatX4EJdBwg9VgCa7Uz5HL8N1m5D3NdXejP")}
)

// totalTokenSupply is a mayhem-mode pool's circulating supply (the SDK's
// PUMP_AMM_TOTAL_TOKEN_SUPPLY).
const totalTokenSupply = 1_000_000_000_000_000

// isPumpPool reports whether the pool was created by the bonding curve's
// pool authority for its base mint.
func isPumpPool(p pumpamm.Pool) bool {
	return pda(pumpProgram, []byte("pool-authority"), p.BaseMint[:]).Equals(p.Creator)
}

// FeesFor is the fees of a trade on pool p, as computeFeesBps computes
// them: with a fee config, by the pool's kind and its market cap in the
// quote token (quoteReserve, virtual reserves included, × circulating
// supply / baseReserve) against the fee tiers; without one, the global
// config's. A creator fee the pool set replaces the creator's share where
// the global config lets it.
func FeesFor(g pumpamm.GlobalConfig, fc *pumpamm.FeeConfig, p pumpamm.Pool, baseSupply, baseReserve uint64, quoteReserve *big.Int) (Fees, error) {
	if fc == nil {
		return Fees{LP: g.LpFeeBasisPoints, Protocol: g.ProtocolFeeBasisPoints, Creator: g.CoinCreatorFeeBasisPoints}, nil
	}
	if baseReserve == 0 {
		return Fees{}, errors.New("pumpswap: the pool holds no base")
	}
	supply := new(big.Int).SetUint64(baseSupply)
	if p.IsMayhemMode {
		supply.SetUint64(totalTokenSupply)
	}
	marketCap := new(big.Int).Mul(quoteReserve, supply)
	marketCap.Quo(marketCap, new(big.Int).SetUint64(baseReserve))
	var f pumpamm.Fees
	switch {
	case !isPumpPool(p):
		f = fc.FlatFees
	case isOneOf(p.QuoteMint, solLike):
		t, err := feeTier(fc.FeeTiers, marketCap)
		if err != nil {
			return Fees{}, err
		}
		f = t
	case p.QuoteMint.Equals(usdcMainnet):
		tiers := fc.StableFeeTiers
		if len(tiers) == 0 {
			tiers = fc.FeeTiers
		}
		t, err := feeTier(tiers, marketCap)
		if err != nil {
			return Fees{}, err
		}
		f = t
	case fc.ExoticFlatFees == (pumpamm.Fees{}):
		f = fc.FlatFees
	default:
		f = fc.ExoticFlatFees
	}
	out := Fees{LP: f.LpFeeBps, Protocol: f.ProtocolFeeBps, Creator: f.CreatorFeeBps}
	if g.CreatorFeeConfigurable && p.CreatorFeeBps > 0 {
		out.Creator = p.CreatorFeeBps
	}
	return out, nil
}

func isOneOf(k solana.PublicKey, set []solana.PublicKey) bool {
	for _, s := range set {
		if k.Equals(s) {
			return true
		}
	}
	return false
}

// feeTier is calculateFeeTier: the first tier below the first threshold,
// else the highest tier whose threshold the market cap reaches.
func feeTier(tiers []pumpamm.FeeTier, marketCap *big.Int) (pumpamm.Fees, error) {
	if len(tiers) == 0 {
		return pumpamm.Fees{}, errors.New("pumpswap: the fee config lists no fee tiers")
	}
	if marketCap.Cmp(tiers[0].MarketCapLamportsThreshold.BigInt()) < 0 {
		return tiers[0].Fees, nil
	}
	for i := len(tiers) - 1; i >= 0; i-- {
		if marketCap.Cmp(tiers[i].MarketCapLamportsThreshold.BigInt()) >= 0 {
			return tiers[i].Fees, nil
		}
	}
	return tiers[0].Fees, nil
}

// ceilFee is the SDK's fee(): amount × bps / 10,000, rounded up.
func ceilFee(amount *big.Int, bps uint64) *big.Int {
	n := new(big.Int).Mul(amount, new(big.Int).SetUint64(bps))
	n.Add(n, big.NewInt(9_999))
	return n.Quo(n, big.NewInt(10_000))
}

// BuyQuote is the base a buy spending quoteIn receives, as buyQuoteInput
// computes it: the fees taken out of the input (each rounded up, the input
// trimmed if they overshoot), one unit less for the program's rounding,
// then the constant product over the quote reserve plus its virtual part.
func BuyQuote(quoteIn, baseReserve uint64, quoteReserve *big.Int, fees Fees, coinCreator solana.PublicKey) (uint64, error) {
	if baseReserve == 0 || quoteReserve.Sign() <= 0 {
		return 0, ErrEmptyPool
	}
	q := new(big.Int).SetUint64(quoteIn)
	eff := new(big.Int).Mul(q, big.NewInt(10_000))
	eff.Quo(eff, new(big.Int).SetUint64(10_000+fees.Total(coinCreator)))
	total := new(big.Int).Add(eff, ceilFee(eff, fees.LP))
	total.Add(total, ceilFee(eff, fees.Protocol))
	if !coinCreator.IsZero() {
		total.Add(total, ceilFee(eff, fees.Creator))
	}
	if total.Cmp(q) > 0 {
		eff.Sub(eff, total.Sub(total, q))
	}
	in := eff.Sub(eff, big.NewInt(1))
	if in.Sign() <= 0 {
		return 0, nil
	}
	num := new(big.Int).Mul(new(big.Int).SetUint64(baseReserve), in)
	den := new(big.Int).Add(quoteReserve, in)
	out := num.Quo(num, den)
	if !out.IsUint64() {
		return 0, errors.New("pumpswap: quote overflows")
	}
	return out.Uint64(), nil
}
