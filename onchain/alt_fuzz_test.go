package onchain_test

import (
	"encoding/binary"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// FuzzDecodeLookupTable feeds arbitrary bytes to the decoder the keeper runs
// on the lookup table accounts getProgramAccounts returns (anyone may create
// a table naming the keeper as its authority): an error or a table of at
// most 256 addresses, never a panic. Seeds: testdata/fuzz and a real
// table's layout.
func FuzzDecodeLookupTable(f *testing.F) {
	table := make([]byte, 56, 56+64)
	binary.LittleEndian.PutUint32(table, 1)
	binary.LittleEndian.PutUint64(table[4:], ^uint64(0))
	table[21] = 1
	copy(table[22:], solana.SystemProgramID[:])
	table = append(table, make([]byte, 64)...)
	f.Add(table)
	f.Fuzz(func(t *testing.T, data []byte) {
		tb, err := onchain.DecodeLookupTable(data)
		if err == nil && len(tb.Addresses) > onchain.MaxTableAddresses {
			t.Fatalf("%d addresses decoded", len(tb.Addresses))
		}
	})
}
