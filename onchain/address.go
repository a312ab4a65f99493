package onchain

import (
	"github.com/gagliardetto/solana-go"
)

// PDA seeds, as in the IDLs.
var (
	stakeSeed  = []byte("stake")
	rewardSeed = []byte("reward")
)

// pda derives a program address. FindProgramAddress fails only when no
// bump in 255..0 gives an off-curve point, which does not happen for
// 32-byte seeds in practice (probability 2^-255), so a failure is a bug.
func pda(seeds [][]byte, program solana.PublicKey) solana.PublicKey {
	addr, _, err := solana.FindProgramAddress(seeds, program)
	if err != nil {
		panic("onchain: no program address for seeds: " + err.Error())
	}
	return addr
}

// StakePDA is the stake account of owner: ["stake", owner].
func (c Config) StakePDA(owner solana.PublicKey) solana.PublicKey {
	return pda([][]byte{stakeSeed, owner[:]}, c.StakingProgram)
}

// StakeVault is the Token-2022 ZERO account owned by owner's stake PDA.
func (c Config) StakeVault(owner solana.PublicKey) solana.PublicKey {
	return ATA(c.StakePDA(owner), c.ZeroMint, Token2022Program)
}

// RewardPDA is the reward account of owner: ["reward", owner].
func (c Config) RewardPDA(owner solana.PublicKey) solana.PublicKey {
	return pda([][]byte{rewardSeed, owner[:]}, c.RewardsProgram)
}

// RewardVault is the USDC account owned by owner's reward PDA.
func (c Config) RewardVault(owner solana.PublicKey) solana.PublicKey {
	return ATA(c.RewardPDA(owner), c.USDCMint, TokenProgram)
}

// ZeroATA is wallet's ZERO (Token-2022) associated token account.
func (c Config) ZeroATA(wallet solana.PublicKey) solana.PublicKey {
	return ATA(wallet, c.ZeroMint, Token2022Program)
}

// USDCATA is wallet's USDC (classic SPL) associated token account.
func (c Config) USDCATA(wallet solana.PublicKey) solana.PublicKey {
	return ATA(wallet, c.USDCMint, TokenProgram)
}

// ATA is the associated token account of owner for mint under
// tokenProgram; owner may itself be a PDA.
func ATA(owner, mint, tokenProgram solana.PublicKey) solana.PublicKey {
	return pda([][]byte{owner[:], tokenProgram[:], mint[:]}, ATAProgram)
}
