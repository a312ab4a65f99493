package keeper

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// The keeper's address lookup tables: every address its daily transfers
// touch, so that its v0 transactions carry several times more transfers
// than legacy ones. The tables are found on the chain (the lookup table
// program's accounts whose authority is the keeper), never recorded
// elsewhere: upkeep re-run after a crash sees what landed. They hold no
// money; their rent comes back if they are ever closed.

// TableRPC is what finding tables and making new ones reads.
type TableRPC interface {
	GetProgramAccountsWithOpts(ctx context.Context, program solana.PublicKey, opts *rpc.GetProgramAccountsOpts) (rpc.GetProgramAccountsResult, error)
	GetSlot(ctx context.Context, commitment rpc.CommitmentType) (uint64, error)
}

// LookupTables finds the keeper's active lookup tables and what they hold.
// An address added in the current slot is not usable yet: upkeep runs at
// 00:00 UTC, hours before the transfers that use it.
func (k *Keeper) LookupTables(ctx context.Context) (onchain.Tables, error) {
	if k.TableRPC == nil {
		return nil, nil
	}
	kp := k.keeperPub()
	res, err := k.TableRPC.GetProgramAccountsWithOpts(ctx, onchain.LookupTableProgram, &rpc.GetProgramAccountsOpts{
		Encoding:   solana.EncodingBase64,
		Commitment: rpc.CommitmentConfirmed,
		Filters: []rpc.RPCFilter{{Memcmp: &rpc.RPCFilterMemcmp{
			Offset: onchain.LookupTableAuthorityOffset, Bytes: solana.Base58(kp[:])}}},
	})
	if err != nil {
		return nil, fmt.Errorf("keeper: find lookup tables: %w", err)
	}
	out := onchain.Tables{}
	for _, a := range res {
		t, err := onchain.DecodeLookupTable(a.Account.Data.GetBinary())
		if err != nil {
			return nil, fmt.Errorf("keeper: lookup table %s: %w", a.Pubkey, err)
		}
		if t.Active && t.Authority != nil && t.Authority.Equals(kp) {
			out[a.Pubkey] = t.Addresses
		}
	}
	return out, nil
}

// TableAddresses are the addresses the keeper's transfers to these
// stakers and payout wallets touch, besides the keeper's own key: the
// shared ones first, then each staker's (wallet, reward account and vault;
// an auto-compounder's stake account and vault too) and each payout
// wallet's (wallet and USDC account).
func (k *Keeper) TableAddresses(all []stakes.Stake, payees []solana.PublicKey) []solana.PublicKey {
	c := k.Config
	kp := k.keeperPub()
	out := []solana.PublicKey{c.USDCMint, c.ZeroMint, c.USDCATA(kp), c.ZeroATA(kp), onchain.TokenProgram,
		onchain.Token2022Program, onchain.ATAProgram, onchain.SystemProgram, c.RewardsProgram, c.StakingProgram}
	for _, s := range all {
		out = append(out, s.Owner, c.RewardPDA(s.Owner), c.RewardVault(s.Owner))
		if s.Autocompound {
			out = append(out, c.StakePDA(s.Owner), c.StakeVault(s.Owner))
		}
	}
	for _, p := range payees {
		out = append(out, p, c.USDCATA(p))
	}
	return out
}

// TableReport is what an upkeep did or would do.
type TableReport struct {
	// Tables is how many tables the keeper has; Addresses how many
	// addresses they hold; Missing how many of those wanted they do not
	// (after an upkeep: left for the next run).
	Tables    int `json:"tables"`
	Addresses int `json:"addresses"`
	Missing   int `json:"missing"`
	// Created and Extended count this upkeep's transactions.
	Created  int `json:"created"`
	Extended int `json:"extended"`
}

// EnsureTables puts every address of want that no table of the keeper
// holds yet into its tables: the tables with room first, then new ones,
// 27 addresses a transaction. A run that could not make every table it
// needed (each waits for a slot of its own) reports Missing above 0, and
// the next run carries on. Without execute it only counts.
func (k *Keeper) EnsureTables(ctx context.Context, want []solana.PublicKey, execute bool) (TableReport, error) {
	if k.TableRPC == nil {
		return TableReport{}, errors.New("keeper: table upkeep needs the RPC client (TableRPC)")
	}
	tables, err := k.LookupTables(ctx)
	if err != nil {
		return TableReport{}, err
	}
	have := map[solana.PublicKey]bool{}
	var rep TableReport
	for _, addrs := range tables {
		for _, a := range addrs {
			have[a] = true
		}
		rep.Addresses += len(addrs)
	}
	rep.Tables = len(tables)
	var missing []solana.PublicKey
	for _, a := range want {
		if !have[a] && !a.Equals(k.keeperPub()) {
			have[a] = true
			missing = append(missing, a)
		}
	}
	rep.Missing = len(missing)
	if !execute || len(missing) == 0 {
		return rep, nil
	}
	// Tables with room, in a stable order; then the new tables the
	// rest needs, all created first (each from its own recent slot: a
	// table's address is its authority's and slot's), and confirmed, as
	// an extend needs its table to exist.
	var open []solana.PublicKey
	for t, addrs := range tables {
		if len(addrs) < onchain.MaxTableAddresses {
			open = append(open, t)
		}
	}
	sort.Slice(open, func(i, j int) bool { return open[i].String() < open[j].String() })
	room := func(t solana.PublicKey) int { return onchain.MaxTableAddresses - len(tables[t]) }
	capacity := 0
	for _, t := range open {
		capacity += room(t)
	}
	kp := k.keeperPub()
	// A table's address comes from its authority and a recent slot, so
	// each new table waits for a slot of its own (a few hundred ms on a
	// live cluster); past newTableWait the rest waits for the next run.
	var lastSlot uint64
	for need := len(missing) - capacity; need > 0; need -= onchain.MaxTableAddresses {
		slot, err := k.nextSlot(ctx, lastSlot)
		if err != nil {
			return rep, err
		}
		if slot == lastSlot {
			break
		}
		lastSlot = slot
		create, t, err := onchain.CreateLookupTable(kp, kp, slot)
		if err != nil {
			return rep, err
		}
		p, err := k.sendOwn(ctx, create)
		if err == nil {
			err = k.confirmOwn(ctx, []pending{p})
		}
		if err != nil {
			return rep, fmt.Errorf("keeper: create lookup table: %w", err)
		}
		tables[t] = nil
		open = append(open, t)
		rep.Created++
		rep.Tables++
	}
	// Extends go out without waiting for each other (a table's extends
	// may land in any order: the order of its addresses does not matter),
	// then are confirmed together: a day of new stakers takes one
	// confirmation's time, not one per transaction.
	var sent []pending
	for len(missing) > 0 && len(open) > 0 {
		table := open[0]
		n := min(len(missing), extendBatch, room(table))
		ext, err := onchain.ExtendLookupTable(table, kp, kp, missing[:n])
		if err != nil {
			return rep, err
		}
		p, err := k.sendOwn(ctx, ext)
		if err != nil {
			return rep, fmt.Errorf("keeper: extend lookup table %s: %w", table, err)
		}
		sent = append(sent, p)
		rep.Extended++
		tables[table] = append(tables[table], missing[:n]...)
		missing = missing[n:]
		if room(table) == 0 {
			open = open[1:]
		}
	}
	if err := k.confirmOwn(ctx, sent); err != nil {
		return rep, fmt.Errorf("keeper: extend lookup tables: %w", err)
	}
	rep.Addresses = 0
	for _, addrs := range tables {
		rep.Addresses += len(addrs)
	}
	rep.Missing = len(missing)
	return rep, nil
}

// extendBatch is how many addresses one extend carries: onchain.MaxExtend
// less what the compute budget instructions take of the size limit.
const extendBatch = onchain.MaxExtend - 3

// tableUnits is the compute limit of a table's create or extend.
const tableUnits = 100_000

// newTableWait bounds the wait for a slot after the last table's.
const newTableWait = 3 * time.Second

// nextSlot is the cluster's confirmed slot once it is past after (0: any),
// or after itself if it does not pass it within newTableWait.
func (k *Keeper) nextSlot(ctx context.Context, after uint64) (uint64, error) {
	deadline := time.Now().Add(newTableWait)
	for {
		slot, err := k.TableRPC.GetSlot(ctx, rpc.CommitmentConfirmed)
		if err != nil {
			return 0, fmt.Errorf("keeper: slot for a new lookup table: %w", err)
		}
		if slot > after || after == 0 {
			return slot, nil
		}
		if time.Now().After(deadline) {
			return after, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pending is a housekeeping transaction sent and not confirmed yet.
type pending struct {
	sig       solana.Signature
	lastValid uint64
}

// sendOwn signs one of the keeper's own housekeeping instructions and sends
// it. Nothing is paid to anyone: no ledger entry; a lookup table holds
// only addresses, and an upkeep re-run sees what landed.
func (k *Keeper) sendOwn(ctx context.Context, ix solana.Instruction) (pending, error) {
	x := k.Exec
	bh, err := x.Chain.LatestBlockhash(ctx)
	if err != nil {
		return pending{}, err
	}
	// The lookup table program runs as an on-chain program now (Core
	// BPF): creating or extending a table takes tens of thousands of units.
	tx, err := onchain.NewTx(x.Keeper.PublicKey(), []solana.Instruction{ix}, bh.Hash,
		onchain.Fees{ComputeUnits: tableUnits, MicroLamportsPerCU: x.PriorityFee}, nil)
	if err != nil {
		return pending{}, err
	}
	if err := x.sign(tx); err != nil {
		return pending{}, err
	}
	sig, err := x.Chain.Send(ctx, tx)
	if err != nil && errors.Is(err, chain.ErrPreflight) {
		return pending{}, err
	}
	// Any other error may be a lost reply: the confirmation decides.
	return pending{sig: sig, lastValid: bh.LastValidBlockHeight}, nil
}

// confirmOwn waits for each sent transaction to land.
func (k *Keeper) confirmOwn(ctx context.Context, sent []pending) error {
	for _, p := range sent {
		out, err := k.Exec.Chain.Confirm(ctx, p.sig, p.lastValid)
		if err != nil {
			return err
		}
		if out != chain.Landed {
			return fmt.Errorf("%s: %v", p.sig, out)
		}
	}
	return nil
}
