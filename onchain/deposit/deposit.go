// Package deposit turns a USDC transfer to the treasury into credits: given
// a transaction signature it reads the transaction from the chain, requires
// that it succeeded and is finalized, and extracts the USDC amount the
// treasury received and the account named in the transaction's memo.
// Credit then grants floor(usdc × 100) credits exactly once per signature.
package deposit

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
)

// Errors a deposit is refused with. They are the user's to see.
var (
	ErrNotFound         = errors.New("deposit: transaction not found")
	ErrNotFinalized     = errors.New("deposit: transaction is not finalized yet; retry shortly")
	ErrFailed           = errors.New("deposit: transaction failed on-chain")
	ErrWrongMint        = errors.New("deposit: the treasury received a token other than USDC")
	ErrWrongDestination = errors.New("deposit: USDC was not sent to the treasury")
	ErrNoTransfer       = errors.New("deposit: no USDC transfer to the treasury")
	ErrMemo             = errors.New("deposit: the transaction needs exactly one memo naming the account")
	ErrTooSmall         = errors.New("deposit: amount is below one credit ($0.01)")
	ErrAlreadyCredited  = errors.New("deposit: this transaction was already credited")
)

// MemoPrograms are the SPL Memo program ids a memo may come from (v2 and
// the older v1 that some wallets still use).
var MemoPrograms = []solana.PublicKey{
	onchain.MemoProgram,
	solana.MustPublicKeyFromBase58("Memo1UhkJRfHyvLMcVucJwxXeuD728EqVDDwQDxFMNo"),
}

// Deposit is a verified USDC transfer to the treasury.
type Deposit struct {
	Signature solana.Signature
	// Account is the memo: the c0mpute account the deposit is for (empty
	// for a deposit read by its reference, whose intent names the account).
	Account string
	// USDC is the amount the treasury received, in base units (1e-6 USDC).
	USDC uint64
	// Credits is floor(usdc × 100) = USDC / 10,000 (1 credit = $0.01).
	Credits int64
	Slot    uint64
}

// Client is the part of the JSON-RPC client Verify uses.
type Client interface {
	GetTransaction(ctx context.Context, sig solana.Signature, opts *rpc.GetTransactionOpts) (*rpc.GetTransactionResult, error)
	GetSignatureStatuses(ctx context.Context, searchTransactionHistory bool, sigs ...solana.Signature) (*rpc.GetSignatureStatusesResult, error)
}

// Verifier checks deposits against one cluster's configuration.
type Verifier struct {
	RPC    Client
	Config onchain.Config
}

// Verify reads the transaction sig and extracts its deposit, for the
// account its memo names.
func (v *Verifier) Verify(ctx context.Context, sig solana.Signature) (Deposit, error) {
	res, err := v.finalized(ctx, sig)
	if err != nil {
		return Deposit{}, err
	}
	d, err := Extract(v.Config, res)
	if err != nil {
		return Deposit{}, err
	}
	if d.Signature != sig {
		return Deposit{}, fmt.Errorf("deposit: the node returned transaction %s for %s", d.Signature, sig)
	}
	return d, nil
}

// VerifyReference reads the transaction sig and extracts its deposit, which
// must carry reference (a Solana Pay transfer request's): the deposit is
// the reference's, whatever its memo says and whoever reports it.
func (v *Verifier) VerifyReference(ctx context.Context, sig solana.Signature, reference solana.PublicKey) (Deposit, error) {
	res, err := v.finalized(ctx, sig)
	if err != nil {
		return Deposit{}, err
	}
	d, err := ExtractReference(v.Config, res, reference)
	if err != nil {
		return Deposit{}, err
	}
	if d.Signature != sig {
		return Deposit{}, fmt.Errorf("deposit: the node returned transaction %s for %s", d.Signature, sig)
	}
	return d, nil
}

// VerifyTransfer reads the transaction sig and extracts the USDC it brought
// the treasury, whatever its memo and references: for a transaction the
// gateway itself co-signed and sent (an x402 top-up), whose account is
// known from its payer, never for one a user reports.
func (v *Verifier) VerifyTransfer(ctx context.Context, sig solana.Signature) (Deposit, error) {
	res, err := v.finalized(ctx, sig)
	if err != nil {
		return Deposit{}, err
	}
	d, _, _, err := extract(v.Config, res)
	if err != nil {
		return Deposit{}, err
	}
	if d.Signature != sig {
		return Deposit{}, fmt.Errorf("deposit: the node returned transaction %s for %s", d.Signature, sig)
	}
	return d, nil
}

// finalized reads a finalized transaction, telling one that failed or is
// not finalized yet from one that does not exist.
func (v *Verifier) finalized(ctx context.Context, sig solana.Signature) (*rpc.GetTransactionResult, error) {
	maxVersion := uint64(0)
	res, err := v.RPC.GetTransaction(ctx, sig, &rpc.GetTransactionOpts{
		Encoding:                       solana.EncodingBase64,
		Commitment:                     rpc.CommitmentFinalized,
		MaxSupportedTransactionVersion: &maxVersion,
	})
	if errors.Is(err, rpc.ErrNotFound) || (err == nil && res == nil) {
		// Not finalized, or not there at all: the status tells which.
		st, serr := v.RPC.GetSignatureStatuses(ctx, true, sig)
		if serr == nil && st != nil && len(st.Value) == 1 && st.Value[0] != nil {
			if st.Value[0].Err != nil {
				return nil, fmt.Errorf("%w: %v", ErrFailed, st.Value[0].Err)
			}
			return nil, ErrNotFinalized
		}
		return nil, fmt.Errorf("%w: %s", ErrNotFound, sig)
	}
	if err != nil {
		return nil, fmt.Errorf("deposit: get transaction %s: %w", sig, err)
	}
	return res, nil
}

// ErrNoReference means the transfer does not carry the deposit intent's
// reference: it is not this intent's to claim.
var ErrNoReference = errors.New("deposit: the transaction does not carry this deposit's reference")

// Extract reads a deposit out of a transaction as getTransaction returns
// it (base64 encoding), for the account its one memo names. It trusts
// nothing in res: every index is checked.
func Extract(cfg onchain.Config, res *rpc.GetTransactionResult) (Deposit, error) {
	d, tx, keys, err := extract(cfg, res)
	if err != nil {
		return Deposit{}, err
	}
	if d.Account, err = findMemo(tx, keys); err != nil {
		return Deposit{}, err
	}
	return d, nil
}

// ExtractReference reads the deposit of a Solana Pay transfer that carries
// reference among its account keys (as Solana Pay adds it: a read-only,
// non-signing key of the transfer). Its memo, if any, is not read.
func ExtractReference(cfg onchain.Config, res *rpc.GetTransactionResult, reference solana.PublicKey) (Deposit, error) {
	d, _, keys, err := extract(cfg, res)
	if err != nil {
		return Deposit{}, err
	}
	if !keys.Contains(reference) {
		return Deposit{}, ErrNoReference
	}
	return d, nil
}

// extract reads the USDC the treasury received in a transaction, with the
// transaction and all its account keys (loaded ones included).
func extract(cfg onchain.Config, res *rpc.GetTransactionResult) (Deposit, *solana.Transaction, solana.PublicKeySlice, error) {
	if res == nil || res.Transaction == nil || res.Meta == nil {
		return Deposit{}, nil, nil, fmt.Errorf("%w: empty response", ErrNotFound)
	}
	if res.Meta.Err != nil {
		return Deposit{}, nil, nil, fmt.Errorf("%w: %v", ErrFailed, res.Meta.Err)
	}
	tx, err := res.Transaction.GetTransaction()
	if err != nil {
		return Deposit{}, nil, nil, fmt.Errorf("deposit: decode transaction: %w", err)
	}
	if tx == nil || len(tx.Signatures) == 0 {
		return Deposit{}, nil, nil, errors.New("deposit: transaction has no signature")
	}
	keys := append(append(append(solana.PublicKeySlice{}, tx.Message.AccountKeys...),
		res.Meta.LoadedAddresses.Writable...), res.Meta.LoadedAddresses.ReadOnly...)

	deltas, err := tokenDeltas(res.Meta.PreTokenBalances, res.Meta.PostTokenBalances, len(keys))
	if err != nil {
		return Deposit{}, nil, nil, err
	}
	treasuryUSDC := cfg.TreasuryUSDC()
	var received *big.Int
	var otherMint, otherDest bool
	for _, d := range deltas {
		if d.delta.Sign() <= 0 {
			continue
		}
		switch {
		case d.mint == cfg.USDCMint && keys[d.index] == treasuryUSDC && d.owner == cfg.Treasury:
			received = d.delta
		case d.owner == cfg.Treasury && d.mint != cfg.USDCMint:
			otherMint = true
		case d.mint == cfg.USDCMint:
			otherDest = true
		}
	}
	switch {
	case received != nil:
	case otherMint:
		return Deposit{}, nil, nil, ErrWrongMint
	case otherDest:
		return Deposit{}, nil, nil, ErrWrongDestination
	default:
		return Deposit{}, nil, nil, ErrNoTransfer
	}
	if !received.IsUint64() {
		return Deposit{}, nil, nil, fmt.Errorf("deposit: amount %s out of range", received)
	}
	usdc := received.Uint64()
	credits := usdc / 10_000
	if credits == 0 {
		return Deposit{}, nil, nil, fmt.Errorf("%w: %d base units", ErrTooSmall, usdc)
	}
	return Deposit{Signature: tx.Signatures[0], USDC: usdc, Credits: int64(credits), Slot: res.Slot}, tx, keys, nil
}

// findMemo returns the one memo's text, validated as an account id.
func findMemo(tx *solana.Transaction, keys solana.PublicKeySlice) (string, error) {
	var memos []string
	for _, ix := range tx.Message.Instructions {
		if int(ix.ProgramIDIndex) >= len(keys) {
			return "", fmt.Errorf("deposit: instruction program index %d out of range", ix.ProgramIDIndex)
		}
		p := keys[ix.ProgramIDIndex]
		for _, m := range MemoPrograms {
			if p == m {
				memos = append(memos, string(ix.Data))
			}
		}
	}
	if len(memos) != 1 {
		return "", fmt.Errorf("%w (found %d)", ErrMemo, len(memos))
	}
	m := strings.TrimSpace(memos[0])
	if m == "" || len(m) > onchain.MaxMemo || !utf8.ValidString(m) {
		return "", fmt.Errorf("%w: memo is empty, too long or not UTF-8", ErrMemo)
	}
	for _, r := range m {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return "", fmt.Errorf("%w: memo holds whitespace or control characters", ErrMemo)
		}
	}
	return m, nil
}

type delta struct {
	index int
	mint  solana.PublicKey
	owner solana.PublicKey
	delta *big.Int
}

// tokenDeltas pairs pre and post balances by account index: post - pre,
// with a missing pre (an account created by the transaction) counting 0.
func tokenDeltas(pre, post []rpc.TokenBalance, nkeys int) ([]delta, error) {
	amount := func(b rpc.TokenBalance) (*big.Int, error) {
		if int(b.AccountIndex) >= nkeys {
			return nil, fmt.Errorf("deposit: token balance index %d out of range", b.AccountIndex)
		}
		if b.UiTokenAmount == nil {
			return nil, errors.New("deposit: token balance without an amount")
		}
		v, ok := new(big.Int).SetString(b.UiTokenAmount.Amount, 10)
		if !ok || v.Sign() < 0 {
			return nil, fmt.Errorf("deposit: bad token amount %q", b.UiTokenAmount.Amount)
		}
		return v, nil
	}
	before := map[uint16]*big.Int{}
	beforeMint := map[uint16]solana.PublicKey{}
	for _, b := range pre {
		v, err := amount(b)
		if err != nil {
			return nil, err
		}
		before[b.AccountIndex] = v
		beforeMint[b.AccountIndex] = b.Mint
	}
	var out []delta
	for _, b := range post {
		v, err := amount(b)
		if err != nil {
			return nil, err
		}
		if b.Owner == nil {
			continue
		}
		if m, ok := beforeMint[b.AccountIndex]; ok && m != b.Mint {
			return nil, fmt.Errorf("deposit: token account %d changed mint", b.AccountIndex)
		}
		d := new(big.Int).Set(v)
		if p, ok := before[b.AccountIndex]; ok {
			d.Sub(d, p)
		}
		out = append(out, delta{index: int(b.AccountIndex), mint: b.Mint, owner: *b.Owner, delta: d})
	}
	return out, nil
}

// Granter credits an account once per idempotency key (store.Store's
// Grant).
type Granter interface {
	Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (applied bool, err error)
}

// IdempotencyKey is the grant key of a deposit: one credit per signature.
func IdempotencyKey(sig solana.Signature) string { return "deposit:" + sig.String() }

// Credit verifies sig and grants its credits to the memo's account exactly
// once; a replayed signature is ErrAlreadyCredited.
func (v *Verifier) Credit(ctx context.Context, g Granter, sig solana.Signature) (Deposit, error) {
	d, err := v.Verify(ctx, sig)
	if err != nil {
		return Deposit{}, err
	}
	applied, err := g.Grant(ctx, d.Account, d.Credits, IdempotencyKey(sig), true)
	if err != nil {
		return Deposit{}, fmt.Errorf("deposit: credit %s to %s: %w", sig, d.Account, err)
	}
	if !applied {
		return d, ErrAlreadyCredited
	}
	return d, nil
}
