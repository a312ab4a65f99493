package onchain

import (
	"encoding/binary"
	"fmt"

	"github.com/gagliardetto/solana-go"
)

// MaxTableAddresses is how many addresses one lookup table holds.
const MaxTableAddresses = 256

// MaxExtend is how many addresses one extend instruction carries so that
// its transaction stays under the size limit.
const MaxExtend = 30

// LookupTableAddress is the table authority creates at recentSlot.
func LookupTableAddress(authority solana.PublicKey, recentSlot uint64) (solana.PublicKey, uint8, error) {
	return solana.FindProgramAddress([][]byte{authority[:], binary.LittleEndian.AppendUint64(nil, recentSlot)}, LookupTableProgram)
}

// CreateLookupTable creates authority's table for recentSlot (a slot the
// cluster still lists in its recent slot hashes), paid by payer.
func CreateLookupTable(authority, payer solana.PublicKey, recentSlot uint64) (solana.Instruction, solana.PublicKey, error) {
	table, bump, err := LookupTableAddress(authority, recentSlot)
	if err != nil {
		return nil, solana.PublicKey{}, fmt.Errorf("onchain: lookup table address: %w", err)
	}
	data := binary.LittleEndian.AppendUint32(nil, 0)
	data = binary.LittleEndian.AppendUint64(data, recentSlot)
	data = append(data, bump)
	return solana.NewInstruction(LookupTableProgram, solana.AccountMetaSlice{
		solana.Meta(table).WRITE(),
		solana.Meta(authority).SIGNER(),
		solana.Meta(payer).WRITE().SIGNER(),
		solana.Meta(SystemProgram),
	}, data), table, nil
}

// ExtendLookupTable appends addresses (at most MaxExtend) to table.
func ExtendLookupTable(table, authority, payer solana.PublicKey, addresses []solana.PublicKey) (solana.Instruction, error) {
	if len(addresses) == 0 || len(addresses) > MaxExtend {
		return nil, fmt.Errorf("onchain: extend lookup table with %d addresses, want 1..%d", len(addresses), MaxExtend)
	}
	data := binary.LittleEndian.AppendUint32(nil, 2)
	data = binary.LittleEndian.AppendUint64(data, uint64(len(addresses)))
	for _, a := range addresses {
		data = append(data, a[:]...)
	}
	return solana.NewInstruction(LookupTableProgram, solana.AccountMetaSlice{
		solana.Meta(table).WRITE(),
		solana.Meta(authority).SIGNER(),
		solana.Meta(payer).WRITE().SIGNER(),
		solana.Meta(SystemProgram),
	}, data), nil
}
