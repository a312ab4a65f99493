package onchain

import (
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/gagliardetto/solana-go"
)

// MaxTxSize is the largest serialized transaction a cluster accepts
// (IPv6 MTU 1280 minus headers).
const MaxTxSize = 1232

// MaxComputeUnits is the per-transaction compute cap.
const MaxComputeUnits = 1_400_000

// ErrTooLarge means one instruction group does not fit a transaction.
var ErrTooLarge = errors.New("onchain: transaction too large")

// Fees prices a transaction's compute: a unit limit sized to what it needs
// and a priority fee per unit.
type Fees struct {
	// ComputeUnits is the limit set on the transaction; 0 sets none.
	ComputeUnits uint32
	// MicroLamportsPerCU is the priority fee; 0 sets none.
	MicroLamportsPerCU uint64
}

func (f Fees) prefix() []solana.Instruction {
	var ixs []solana.Instruction
	if f.ComputeUnits > 0 {
		ixs = append(ixs, SetComputeUnitLimit(f.ComputeUnits))
	}
	if f.MicroLamportsPerCU > 0 {
		ixs = append(ixs, SetComputeUnitPrice(f.MicroLamportsPerCU))
	}
	return ixs
}

// LamportsFor is what a transaction with signers signatures pays: 5,000
// lamports a signature plus the priority fee on its unit limit, rounded up.
func (f Fees) LamportsFor(signers int) uint64 {
	return 5000*uint64(signers) + (f.MicroLamportsPerCU*uint64(f.ComputeUnits)+999_999)/1_000_000
}

// Tables are address lookup tables a v0 transaction may load addresses
// from: table address → its addresses.
type Tables map[solana.PublicKey]solana.PublicKeySlice

// tableIndex maps each address to a table holding it.
type tableIndex map[solana.PublicKey]solana.PublicKey

func (t Tables) index() tableIndex {
	idx := tableIndex{}
	for table, addrs := range t {
		for _, a := range addrs {
			if _, ok := idx[a]; !ok {
				idx[a] = table
			}
		}
	}
	return idx
}

// subset is the tables of idx that hold an account of ixs: a message lists
// only the tables it loads from, and assembling one is faster given only
// those.
func (t Tables) subset(idx tableIndex, ixs []solana.Instruction) Tables {
	if len(t) == 0 {
		return nil
	}
	out := Tables{}
	for _, ix := range ixs {
		for _, m := range ix.Accounts() {
			if table, ok := idx[m.PublicKey]; ok {
				out[table] = t[table]
			}
		}
	}
	return out
}

// For is the tables that hold an account of ixs.
func (t Tables) For(ixs []solana.Instruction) Tables { return t.subset(t.index(), ixs) }

// NewTx assembles an unsigned transaction paid by payer: the compute budget
// instructions, then ixs. With tables it is a v0 transaction, else legacy.
func NewTx(payer solana.PublicKey, ixs []solana.Instruction, blockhash solana.Hash, fees Fees, tables Tables) (*solana.Transaction, error) {
	opts := []solana.TransactionOption{solana.TransactionPayer(payer)}
	if len(tables) > 0 {
		opts = append(opts, solana.TransactionAddressTables(tables))
	}
	tx, err := solana.NewTransaction(append(fees.prefix(), ixs...), blockhash, opts...)
	if err != nil {
		return nil, fmt.Errorf("onchain: assemble transaction: %w", err)
	}
	if n, err := Size(tx); err != nil {
		return nil, err
	} else if n > MaxTxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, MaxTxSize)
	}
	return tx, nil
}

// Size is the serialized size of tx once every required signature is
// present.
func Size(tx *solana.Transaction) (int, error) {
	msg, err := tx.Message.MarshalBinary()
	if err != nil {
		return 0, fmt.Errorf("onchain: encode message: %w", err)
	}
	n := int(tx.Message.Header.NumRequiredSignatures)
	return shortVecLen(n) + 64*n + len(msg), nil
}

func shortVecLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}

// Unsigned encodes tx for a wallet to sign: the wire format with zeroed
// signatures, base64, as wallets' signTransaction accepts it.
func Unsigned(tx *solana.Transaction) (string, error) {
	cp := *tx
	cp.Signatures = make([]solana.Signature, tx.Message.Header.NumRequiredSignatures)
	b, err := cp.MarshalBinary()
	if err != nil {
		return "", fmt.Errorf("onchain: encode transaction: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// Group is instructions that must land together (a payout's ATA creation
// and transfer), with the compute units they need.
type Group struct {
	Instructions []solana.Instruction
	ComputeUnits uint32
	// Trace is the most instructions the group runs, its programs' calls
	// to other programs included (an ATA creation calls four): a
	// transaction's trace may not pass MaxInstructionTrace. 0 counts
	// defaultTrace per instruction.
	Trace int
	// Solo groups get a transaction of their own: a swap whose output is
	// read from its transaction's balances must not share it.
	Solo bool
}

// MaxInstructionTrace is how many instructions one transaction may run,
// calls between programs included: the cluster fails a transaction past it.
const MaxInstructionTrace = 64

// defaultTrace is the trace counted for an instruction of a group that does
// not say: an instruction that may create an account calls about four
// others.
const defaultTrace = 5

// trace is g's instruction trace, as counted for packing.
func (g Group) trace() int {
	if g.Trace > 0 {
		return g.Trace
	}
	return defaultTrace * len(g.Instructions)
}

// MaxAccountLocks is how many accounts one transaction may lock (static
// and loaded from tables together, program ids included): the cluster
// refuses more. Lookup tables make this, not the size, a v0 transaction's
// limit.
const MaxAccountLocks = 64

// accountLocks counts the distinct accounts of a transaction of ixs paid by
// payer, with the compute budget program its fees add.
func accountLocks(payer solana.PublicKey, ixs []solana.Instruction) int {
	seen := map[solana.PublicKey]bool{payer: true, ComputeBudgetID: true}
	for _, ix := range ixs {
		seen[ix.ProgramID()] = true
		for _, m := range ix.Accounts() {
			seen[m.PublicKey] = true
		}
	}
	return len(seen)
}

// Pack splits groups, in order, into as few transactions as fit: each
// under MaxTxSize with fees' budget instructions included, under
// MaxComputeUnits, MaxInstructionTrace and MaxAccountLocks. It returns, for each transaction, the indexes of its
// groups. A group that does not fit alone is ErrTooLarge.
//
// Whether a run of groups fits only gets harder as groups are added, so
// each transaction's end is found by galloping then bisecting: O(log k)
// trial encodings for k groups per transaction instead of k.
func Pack(payer solana.PublicKey, groups []Group, fees Fees, tables Tables) ([][]int, error) {
	idx := tables.index()
	fits := func(from, to int) (bool, error) { // groups[from:to]
		var ixs []solana.Instruction
		var units uint32
		trace := 2 // the compute budget instructions
		for i := from; i < to; i++ {
			if i > from && (groups[i].Solo || groups[from].Solo) {
				return false, nil
			}
			ixs = append(ixs, groups[i].Instructions...)
			units += groups[i].ComputeUnits
			trace += groups[i].trace()
			if units > MaxComputeUnits || trace > MaxInstructionTrace {
				return false, nil
			}
		}
		if accountLocks(payer, ixs) > MaxAccountLocks {
			return false, nil
		}
		f := fees
		if f.ComputeUnits > 0 || f.MicroLamportsPerCU > 0 {
			f.ComputeUnits = max(units, 1)
		}
		_, err := NewTx(payer, ixs, solana.Hash{}, f, tables.subset(idx, ixs))
		if errors.Is(err, ErrTooLarge) {
			return false, nil
		}
		return err == nil, err
	}
	var out [][]int
	for from := 0; from < len(groups); {
		ok, err := fits(from, from+1)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: group %d does not fit a transaction on its own", ErrTooLarge, from)
		}
		// good fits; bad does not (or is past the end).
		good, step := from+1, 1
		bad := len(groups) + 1
		for good+step <= len(groups) {
			ok, err := fits(from, good+step)
			if err != nil {
				return nil, err
			}
			if !ok {
				bad = good + step
				break
			}
			good += step
			step *= 2
		}
		if bad > len(groups) {
			bad = len(groups) + 1
		}
		for bad-good > 1 {
			mid := (good + bad) / 2
			if mid > len(groups) {
				bad = mid
				continue
			}
			ok, err := fits(from, mid)
			if err != nil {
				return nil, err
			}
			if ok {
				good = mid
			} else {
				bad = mid
			}
		}
		idx := make([]int, 0, good-from)
		for i := from; i < good; i++ {
			idx = append(idx, i)
		}
		out = append(out, idx)
		from = good
	}
	return out, nil
}
