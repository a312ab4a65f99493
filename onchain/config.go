package onchain

import (
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"
)

// Well-known program ids. The zero_staking and zero_rewards ids are
// configuration (Config), not constants: each cluster has its own deploy.
var (
	TokenProgram       = solana.TokenProgramID
	Token2022Program   = solana.MustPublicKeyFromBase58("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb")
	ATAProgram         = solana.SPLAssociatedTokenAccountProgramID
	SystemProgram      = solana.SystemProgramID
	MemoProgram        = solana.MustPublicKeyFromBase58("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr")
	ComputeBudgetID    = solana.MustPublicKeyFromBase58("ComputeBudget111111111111111111111111111111")
	LookupTableProgram = solana.MustPublicKeyFromBase58("AddressLookupTab1e1111111111111111111111111")
)

// Decimals of ZERO and USDC (SPEC: both 6).
const (
	ZeroDecimals = 6
	USDCDecimals = 6
)

// Config names the programs and mints of one cluster.
type Config struct {
	// StakingProgram is the zero_staking program id.
	StakingProgram solana.PublicKey
	// RewardsProgram is the zero_rewards program id.
	RewardsProgram solana.PublicKey
	// ZeroMint is the Token-2022 ZERO mint.
	ZeroMint solana.PublicKey
	// USDCMint is the classic SPL USDC mint.
	USDCMint solana.PublicKey
	// Treasury is the wallet whose USDC associated token account receives
	// deposits and pays the keeper's transfers.
	Treasury solana.PublicKey
}

// Validate reports the first missing field.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    solana.PublicKey
	}{
		{"staking program", c.StakingProgram},
		{"rewards program", c.RewardsProgram},
		{"ZERO mint", c.ZeroMint},
		{"USDC mint", c.USDCMint},
		{"treasury", c.Treasury},
	} {
		if f.v.IsZero() {
			errs = append(errs, fmt.Errorf("onchain: config: %s is not set", f.name))
		}
	}
	return errors.Join(errs...)
}

// TreasuryUSDC is the treasury's USDC account: deposits arrive there.
func (c Config) TreasuryUSDC() solana.PublicKey {
	return ATA(c.Treasury, c.USDCMint, TokenProgram)
}
