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

// lookupTableMeta is the size of a lookup table account's header; its
// addresses follow, 32 bytes each.
const lookupTableMeta = 56

// LookupTable is an address lookup table account as the chain holds it.
type LookupTable struct {
	// Authority may extend the table; nil once frozen.
	Authority *solana.PublicKey
	// Active is false once the table was deactivated (it is then closed
	// after a cool-down, and must not be used).
	Active    bool
	Addresses []solana.PublicKey
}

// DecodeLookupTable parses a lookup table account's data: a u32 type (1),
// the deactivation slot (u64::MAX while active), the last extension's slot
// and start index, the optional authority, padding to 56 bytes, then the
// addresses.
func DecodeLookupTable(data []byte) (LookupTable, error) {
	if len(data) < lookupTableMeta || (len(data)-lookupTableMeta)%32 != 0 {
		return LookupTable{}, fmt.Errorf("onchain: lookup table of %d bytes", len(data))
	}
	if typ := binary.LittleEndian.Uint32(data[0:4]); typ != 1 {
		return LookupTable{}, fmt.Errorf("onchain: lookup table account of type %d", typ)
	}
	n := (len(data) - lookupTableMeta) / 32
	if n > MaxTableAddresses {
		return LookupTable{}, fmt.Errorf("onchain: lookup table with %d addresses", n)
	}
	t := LookupTable{Active: binary.LittleEndian.Uint64(data[4:12]) == ^uint64(0)}
	if data[21] == 1 {
		a := solana.PublicKeyFromBytes(data[22:54])
		t.Authority = &a
	}
	for i := range n {
		off := lookupTableMeta + 32*i
		t.Addresses = append(t.Addresses, solana.PublicKeyFromBytes(data[off:off+32]))
	}
	return t, nil
}

// LookupTableAuthorityOffset is where a lookup table's authority sits in
// its data: a memcmp filter there finds one authority's tables.
const LookupTableAuthorityOffset = 22
