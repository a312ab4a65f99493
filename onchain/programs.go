package onchain

import (
	"fmt"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerorewards"
	"github.com/c0mpute/c0mpute/clients/zerostaking"
)

// rebind points a generated instruction at the configured program id: the
// generated clients carry the IDL's address, while each cluster deploys the
// programs at ids of its own.
func rebind(program solana.PublicKey) func(solana.Instruction, error) (solana.Instruction, error) {
	return func(ix solana.Instruction, err error) (solana.Instruction, error) {
		if err != nil {
			return nil, err
		}
		data, err := ix.Data()
		if err != nil {
			return nil, fmt.Errorf("instruction data: %w", err)
		}
		return solana.NewInstruction(program, ix.Accounts(), data), nil
	}
}

func positive(amount uint64) error {
	if amount == 0 {
		return fmt.Errorf("onchain: amount must be greater than zero")
	}
	return nil
}

// Stake deposits amount ZERO base units from payerZero (a ZERO account
// payer controls) into owner's vault. payer may differ from owner: anyone
// may stake for a beneficiary.
func (c Config) Stake(payer, owner, payerZero solana.PublicKey, amount uint64) (solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	ix, err := rebind(c.StakingProgram)(zerostaking.NewStakeInstruction(amount,
		payer, owner, c.StakePDA(owner), c.StakeVault(owner), payerZero, c.ZeroMint,
		Token2022Program, ATAProgram, SystemProgram))
	if err != nil {
		return nil, fmt.Errorf("onchain: stake: %w", err)
	}
	return ix, nil
}

// Unstake withdraws amount ZERO base units from owner's vault to owner's
// ZERO account; the program takes the newest deposits first.
func (c Config) Unstake(owner solana.PublicKey, amount uint64) (solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	ix, err := rebind(c.StakingProgram)(zerostaking.NewUnstakeInstruction(amount,
		owner, c.StakePDA(owner), c.StakeVault(owner), c.ZeroATA(owner), c.ZeroMint, Token2022Program))
	if err != nil {
		return nil, fmt.Errorf("onchain: unstake: %w", err)
	}
	return ix, nil
}

// SetAutocompound opts owner's daily reward in or out of auto-compounding.
func (c Config) SetAutocompound(owner solana.PublicKey, enabled bool) (solana.Instruction, error) {
	ix, err := rebind(c.StakingProgram)(zerostaking.NewSetAutocompoundInstruction(enabled, owner, c.StakePDA(owner)))
	if err != nil {
		return nil, fmt.Errorf("onchain: set_autocompound: %w", err)
	}
	return ix, nil
}

// Fund moves amount USDC base units from keeperUSDC, controlled by keeper,
// into owner's reward vault.
func (c Config) Fund(keeper, keeperUSDC, owner solana.PublicKey, amount uint64) (solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	ix, err := rebind(c.RewardsProgram)(zerorewards.NewFundInstruction(amount,
		keeper, owner, c.RewardPDA(owner), c.RewardVault(owner), keeperUSDC, c.USDCMint,
		TokenProgram, ATAProgram, SystemProgram))
	if err != nil {
		return nil, fmt.Errorf("onchain: fund: %w", err)
	}
	return ix, nil
}

// Claim withdraws amount USDC base units from owner's reward vault to
// owner's USDC account.
func (c Config) Claim(owner solana.PublicKey, amount uint64) (solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	ix, err := rebind(c.RewardsProgram)(zerorewards.NewClaimInstruction(amount,
		owner, c.RewardPDA(owner), c.RewardVault(owner), c.USDCATA(owner), c.USDCMint, TokenProgram))
	if err != nil {
		return nil, fmt.Errorf("onchain: claim: %w", err)
	}
	return ix, nil
}

// USDCPayout is an idempotent payout of amount USDC base units from the
// account from (controlled by authority) to wallet: create wallet's USDC
// account if missing (paid by payer), then transfer_checked.
func (c Config) USDCPayout(payer, authority, from, wallet solana.PublicKey, amount uint64) ([]solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	return []solana.Instruction{
		CreateATAIdempotent(payer, wallet, c.USDCMint, TokenProgram),
		TransferChecked(TokenProgram, from, c.USDCMint, c.USDCATA(wallet), authority, amount, USDCDecimals),
	}, nil
}

// BurnZero burns amount ZERO base units from account, controlled by
// authority (Token-2022 burn_checked).
func (c Config) BurnZero(account, authority solana.PublicKey, amount uint64) (solana.Instruction, error) {
	if err := positive(amount); err != nil {
		return nil, err
	}
	return BurnChecked(Token2022Program, account, c.ZeroMint, authority, amount, ZeroDecimals), nil
}

// Staking actions a staker's wallet signs (the API builds them, and
// c0mpute-wallet checks what the API built against its own).
const (
	ActionStake           = "stake"
	ActionUnstake         = "unstake"
	ActionClaim           = "claim"
	ActionSetAutocompound = "set_autocompound"
)

// StakingTx is the unsigned transaction of a staking action for wallet,
// which pays its fee and signs: amount is base units (ZERO to stake or
// unstake, USDC to claim), enabled set_autocompound's setting. Unstake and
// claim first make the wallet's own token account if it has none. It is a
// v0 transaction, with a compute limit sized to the action.
func (c Config) StakingTx(wallet solana.PublicKey, action string, amount uint64, enabled bool, blockhash solana.Hash) (*solana.Transaction, error) {
	var ixs []solana.Instruction
	var units uint32
	switch action {
	case ActionStake:
		ix, err := c.Stake(wallet, wallet, c.ZeroATA(wallet), amount)
		if err != nil {
			return nil, err
		}
		ixs, units = []solana.Instruction{ix}, 120_000
	case ActionUnstake:
		ix, err := c.Unstake(wallet, amount)
		if err != nil {
			return nil, err
		}
		ixs, units = []solana.Instruction{CreateATAIdempotent(wallet, wallet, c.ZeroMint, Token2022Program), ix}, 100_000
	case ActionClaim:
		ix, err := c.Claim(wallet, amount)
		if err != nil {
			return nil, err
		}
		ixs, units = []solana.Instruction{CreateATAIdempotent(wallet, wallet, c.USDCMint, TokenProgram), ix}, 80_000
	case ActionSetAutocompound:
		ix, err := c.SetAutocompound(wallet, enabled)
		if err != nil {
			return nil, err
		}
		ixs, units = []solana.Instruction{ix}, 30_000
	default:
		return nil, fmt.Errorf("onchain: unknown staking action %q", action)
	}
	tx, err := NewTx(wallet, ixs, blockhash, Fees{ComputeUnits: units}, nil)
	if err != nil {
		return nil, err
	}
	tx.Message.SetVersion(solana.MessageVersionV0)
	return tx, nil
}
