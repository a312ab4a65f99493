package svmtest

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/programs/system"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
)

// Env is a harness with real mints: USDC (classic SPL) and ZERO
// (Token-2022), both 6 decimals, minted by Authority, and a funded
// treasury wallet.
type Env struct {
	*Harness
	Chain     *chain.Chain
	Config    onchain.Config
	Authority solana.PrivateKey
	Treasury  solana.PrivateKey
}

// NewEnv starts a harness and creates the mints with real transactions.
func NewEnv(t testing.TB) *Env {
	t.Helper()
	h := Start(t)
	e := &Env{Harness: h, Chain: chain.New(h.RPC)}
	// The harness answers at once; a test that waits is a bug, so keep
	// the timeout short. Confirmed is enough for setup transactions, and
	// lets tests hold finality back.
	e.Chain.Poll = 5 * time.Millisecond
	e.Chain.ConfirmTimeout = 10 * time.Second
	e.Chain.Commitment = rpc.CommitmentConfirmed
	e.Authority = NewKey(t)
	e.Treasury = NewKey(t)
	h.Airdrop(t, e.Authority.PublicKey(), 1_000_000_000_000)
	h.Airdrop(t, e.Treasury.PublicKey(), 100_000_000_000)
	usdc := e.CreateMint(t, onchain.TokenProgram, onchain.USDCDecimals)
	zero := e.CreateMint(t, onchain.Token2022Program, onchain.ZeroDecimals)
	e.Config = onchain.Config{
		StakingProgram: solana.MustPublicKeyFromBase58("F8HE29zAYvsbdjmULERpgBQvB1owz3z9i8ay6AH4wSqS"),
		RewardsProgram: solana.MustPublicKeyFromBase58("Gd1ZjXvMtaDsmta41LAd4dcSGtqShAbiwuHZAfe4BqcB"),
		ZeroMint:       zero,
		USDCMint:       usdc,
		Treasury:       e.Treasury.PublicKey(),
	}
	return e
}

// NewKey is a fresh keypair.
func NewKey(t testing.TB) solana.PrivateKey {
	t.Helper()
	k, err := solana.NewRandomPrivateKey()
	if err != nil {
		t.Fatalf("svmtest: new key: %v", err)
	}
	return k
}

// Send signs ixs with signers (the first pays), sends and requires that
// the transaction landed.
func (e *Env) Send(t testing.TB, signers []solana.PrivateKey, ixs ...solana.Instruction) solana.Signature {
	t.Helper()
	sig, out := e.Try(t, signers, ixs...)
	if out != chain.Landed {
		t.Fatalf("svmtest: transaction %s: %s", sig, out)
	}
	return sig
}

// Try is Send that returns the outcome instead of requiring success; a
// transaction refused by preflight is Failed.
func (e *Env) Try(t testing.TB, signers []solana.PrivateKey, ixs ...solana.Instruction) (solana.Signature, chain.Outcome) {
	t.Helper()
	ctx := context.Background()
	bh, err := e.Chain.LatestBlockhash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := onchain.NewTx(signers[0].PublicKey(), ixs, bh.Hash, onchain.Fees{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(tx, signers...); err != nil {
		t.Fatal(err)
	}
	sig, err := e.Chain.Send(ctx, tx)
	if err != nil {
		// Preflight refused it: it did not land.
		t.Logf("svmtest: send: %v", err)
		return sig, chain.Failed
	}
	out, err := e.Chain.Confirm(ctx, sig, bh.LastValidBlockHeight)
	if err != nil {
		t.Fatal(err)
	}
	return sig, out
}

// Sign signs tx with the keys it requires.
func Sign(tx *solana.Transaction, keys ...solana.PrivateKey) error {
	_, err := tx.Sign(func(pub solana.PublicKey) *solana.PrivateKey {
		for i := range keys {
			if keys[i].PublicKey() == pub {
				return &keys[i]
			}
		}
		return nil
	})
	return err
}

// CreateMint creates a mint under tokenProgram with Authority as mint
// authority and no freeze authority.
func (e *Env) CreateMint(t testing.TB, tokenProgram solana.PublicKey, decimals uint8) solana.PublicKey {
	t.Helper()
	mint := NewKey(t)
	const space = 82
	rent, err := e.RPC.GetMinimumBalanceForRentExemption(context.Background(), space, rpc.CommitmentConfirmed)
	if err != nil {
		t.Fatal(err)
	}
	create := system.NewCreateAccountInstruction(rent, space, tokenProgram, e.Authority.PublicKey(), mint.PublicKey()).Build()
	// InitializeMint2: tag 20, decimals, mint authority, no freeze authority.
	data := append([]byte{20, decimals}, e.Authority.PublicKey().Bytes()...)
	data = append(data, 0)
	data = append(data, make([]byte, 32)...)
	init := solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{solana.Meta(mint.PublicKey()).WRITE()}, data)
	e.Send(t, []solana.PrivateKey{e.Authority, mint}, create, init)
	return mint.PublicKey()
}

// MintTo creates owner's associated account for mint if needed and mints
// amount base units into it; it returns the account.
func (e *Env) MintTo(t testing.TB, mint, tokenProgram, owner solana.PublicKey, amount uint64) solana.PublicKey {
	t.Helper()
	ata := onchain.ATA(owner, mint, tokenProgram)
	data := make([]byte, 10)
	data[0] = 14 // MintToChecked
	binary.LittleEndian.PutUint64(data[1:], amount)
	data[9] = 6
	mintTo := solana.NewInstruction(tokenProgram, solana.AccountMetaSlice{
		solana.Meta(mint).WRITE(), solana.Meta(ata).WRITE(), solana.Meta(e.Authority.PublicKey()).SIGNER(),
	}, data)
	e.Send(t, []solana.PrivateKey{e.Authority},
		onchain.CreateATAIdempotent(e.Authority.PublicKey(), owner, mint, tokenProgram), mintTo)
	return ata
}

// TokenBalance is a token account's balance in base units; 0 if the
// account does not exist.
func (e *Env) TokenBalance(t testing.TB, account solana.PublicKey) uint64 {
	t.Helper()
	res, err := e.RPC.GetAccountInfo(context.Background(), account)
	if err != nil || res == nil || res.Value == nil {
		return 0
	}
	d := res.Value.Data.GetBinary()
	if len(d) < 72 {
		t.Fatalf("svmtest: %s is not a token account", account)
	}
	return binary.LittleEndian.Uint64(d[64:72])
}

// MintSupply is a mint's supply in base units.
func (e *Env) MintSupply(t testing.TB, mint solana.PublicKey) uint64 {
	t.Helper()
	res, err := e.RPC.GetAccountInfo(context.Background(), mint)
	if err != nil || res == nil || res.Value == nil {
		t.Fatalf("svmtest: mint %s: %v", mint, err)
	}
	return binary.LittleEndian.Uint64(res.Value.Data.GetBinary()[36:44])
}
