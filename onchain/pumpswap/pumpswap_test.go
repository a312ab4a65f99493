package pumpswap_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/pumpswap"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

func key(label string) solana.PublicKey {
	h := sha256.Sum256([]byte(label))
	return solana.PublicKeyFromBytes(h[:])
}

// TestBuyMatchesSDK builds the buy with our generated client and with the
// official PumpSwap SDK for the same pool and inputs: every instruction's
// data and account metas must be identical.
func TestBuyMatchesSDK(t *testing.T) {
	for _, tc := range []struct {
		name              string
		creator, cashback bool
		userBaseExists    bool
		baseOut, maxIn    uint64
	}{
		{"plain, creates the ZERO account", false, false, false, 1, 1},
		{"coin creator", true, false, true, 123_456_789, 1_000_000},
		{"cashback coin with creator", true, true, false, 18446744073709551615, 18446744073709551615},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pumpswap.Pool{
				Address: key("pool"), BaseMint: key("zero"), QuoteMint: key("usdc"),
				BaseTokenProgram: onchain.Token2022Program, QuoteTokenProgram: onchain.TokenProgram,
				PoolBaseTokenAccount: key("pool base"), PoolQuoteTokenAccount: key("pool quote"),
				IsCashbackCoin: tc.cashback, ProtocolFeeRecipient: key("protocol fee"), BuybackFeeRecipient: key("buyback fee"),
			}
			if tc.creator {
				p.CoinCreator = key("creator")
			}
			user := key("keeper")
			ixs, err := pumpswap.BuyInstructions(p, user, tc.baseOut, tc.maxIn, !tc.userBaseExists)
			if err != nil {
				t.Fatal(err)
			}
			want := svmtest.PumpBuy(t, map[string]any{
				"pool": map[string]any{
					"address": p.Address.String(), "base_mint": p.BaseMint.String(), "quote_mint": p.QuoteMint.String(),
					"base_token_program": p.BaseTokenProgram.String(), "quote_token_program": p.QuoteTokenProgram.String(),
					"pool_base_token_account": p.PoolBaseTokenAccount.String(), "pool_quote_token_account": p.PoolQuoteTokenAccount.String(),
					"coin_creator": p.CoinCreator.String(), "is_cashback_coin": p.IsCashbackCoin,
					"protocol_fee_recipient": p.ProtocolFeeRecipient.String(), "buyback_fee_recipient": p.BuybackFeeRecipient.String(),
				},
				"user": user.String(), "base_out": fmt.Sprint(tc.baseOut), "max_quote_in": fmt.Sprint(tc.maxIn),
				"user_base_exists": tc.userBaseExists,
			})
			var got []svmtest.Encoded
			for _, ix := range ixs {
				data, err := ix.Data()
				if err != nil {
					t.Fatal(err)
				}
				e := svmtest.Encoded{Data: hex.EncodeToString(data), Program: ix.ProgramID().String()}
				for _, m := range ix.Accounts() {
					e.Keys = append(e.Keys, svmtest.Meta{Pubkey: m.PublicKey.String(), Signer: m.IsSigner, Writable: m.IsWritable})
				}
				got = append(got, e)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Fatalf("ours and the SDK's differ\n ours: %s\n sdk:  %s", gj, wj)
			}
		})
	}
}
