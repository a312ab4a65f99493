package onchain

import (
	"encoding/binary"
	"fmt"

	"github.com/gagliardetto/solana-go"
)

// SPL Token instruction tags. Token-2022 keeps the same tags and layouts for
// these, so one encoder serves both programs.
const (
	tagTransferChecked = 12
	tagBurnChecked     = 15
	// ataCreateIdempotent is the ATA program's CreateIdempotent: it
	// succeeds when the account already exists, so a retried payout never
	// fails on account creation.
	ataCreateIdempotent = 1
)

func checkedData(tag byte, amount uint64, decimals uint8) []byte {
	d := make([]byte, 10)
	d[0] = tag
	binary.LittleEndian.PutUint64(d[1:], amount)
	d[9] = decimals
	return d
}

// TransferChecked moves amount base units of mint from src to dst, signed
// by authority. tokenProgram is TokenProgram or Token2022Program.
func TransferChecked(tokenProgram, src, mint, dst, authority solana.PublicKey, amount uint64, decimals uint8) solana.Instruction {
	return solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{
		solana.Meta(src).WRITE(),
		solana.Meta(mint),
		solana.Meta(dst).WRITE(),
		solana.Meta(authority).SIGNER(),
	}, checkedData(tagTransferChecked, amount, decimals))
}

// BurnChecked burns amount base units of mint from account, signed by
// authority.
func BurnChecked(tokenProgram, account, mint, authority solana.PublicKey, amount uint64, decimals uint8) solana.Instruction {
	return solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{
		solana.Meta(account).WRITE(),
		solana.Meta(mint).WRITE(),
		solana.Meta(authority).SIGNER(),
	}, checkedData(tagBurnChecked, amount, decimals))
}

// CreateATAIdempotent creates owner's associated token account for mint
// unless it exists, paid by payer.
func CreateATAIdempotent(payer, owner, mint, tokenProgram solana.PublicKey) solana.Instruction {
	return solana.NewInstruction(ATAProgram, solana.AccountMetaSlice{
		solana.Meta(payer).WRITE().SIGNER(),
		solana.Meta(ATA(owner, mint, tokenProgram)).WRITE(),
		solana.Meta(owner),
		solana.Meta(mint),
		solana.Meta(SystemProgram),
		solana.Meta(tokenProgram),
	}, []byte{ataCreateIdempotent})
}

// MaxMemo bounds a memo: a deposit memo carries an account id, and a
// bound keeps a transaction's size predictable.
const MaxMemo = 128

// Memo is an SPL Memo instruction carrying text, with no signers.
func Memo(text string) (solana.Instruction, error) {
	if len(text) == 0 || len(text) > MaxMemo {
		return nil, fmt.Errorf("onchain: memo must be 1..%d bytes, got %d", MaxMemo, len(text))
	}
	return solana.NewInstruction(MemoProgram, solana.AccountMetaSlice{}, []byte(text)), nil
}

// SetComputeUnitLimit caps the compute units a transaction may use; the
// priority fee is charged on this cap, so it is sized to the transaction.
func SetComputeUnitLimit(units uint32) solana.Instruction {
	d := make([]byte, 5)
	d[0] = 2
	binary.LittleEndian.PutUint32(d[1:], units)
	return solana.NewInstruction(ComputeBudgetID, solana.AccountMetaSlice{}, d)
}

// SetComputeUnitPrice sets the priority fee in micro-lamports per compute
// unit.
func SetComputeUnitPrice(microLamports uint64) solana.Instruction {
	d := make([]byte, 9)
	d[0] = 3
	binary.LittleEndian.PutUint64(d[1:], microLamports)
	return solana.NewInstruction(ComputeBudgetID, solana.AccountMetaSlice{}, d)
}
