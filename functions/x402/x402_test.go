package x402

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain"
)

// fixture is a seller and a buyer with fixed keys, so that fuzz seeds
// stay valid from run to run.
type fixture struct {
	feePayer, payer, treasury solana.PrivateKey
	mint                      solana.PublicKey
	offer                     Offer
}

func key(seed byte) solana.PrivateKey {
	var s [32]byte
	for i := range s {
		s[i] = seed
	}
	return solana.PrivateKey(ed25519.NewKeyFromSeed(s[:]))
}

func newFixture() fixture {
	f := fixture{feePayer: key(1), payer: key(2), treasury: key(3), mint: key(4).PublicKey()}
	f.offer = Offer{Network: networks["devnet"], Amount: 1_500_000, Asset: f.mint, PayTo: f.treasury.PublicKey(), FeePayer: f.feePayer.PublicKey()}
	return f
}

// tx is what the official client builds (x402 @x402/svm ExactSvmScheme):
// compute limit, compute price, TransferChecked, memo; edit changes it.
type tx struct {
	ixs     []solana.Instruction
	v0      bool
	signers []solana.PrivateKey
}

type ix struct {
	program solana.PublicKey
	metas   solana.AccountMetaSlice
	data    []byte
}

func (i ix) ProgramID() solana.PublicKey     { return i.program }
func (i ix) Accounts() []*solana.AccountMeta { return i.metas }
func (i ix) Data() ([]byte, error)           { return i.data, nil }
func computeLimit(units uint32) ix {
	return ix{onchain.ComputeBudgetID, nil, binary.LittleEndian.AppendUint32([]byte{2}, units)}
}
func computePrice(micro uint64) ix {
	return ix{onchain.ComputeBudgetID, nil, binary.LittleEndian.AppendUint64([]byte{3}, micro)}
}
func memo(text string) ix { return ix{onchain.MemoProgram, nil, []byte(text)} }
func transfer(src, mint, dst, auth solana.PublicKey, amount uint64) ix {
	return ix{onchain.TokenProgram, solana.AccountMetaSlice{
		solana.Meta(src).WRITE(), solana.Meta(mint), solana.Meta(dst).WRITE(), solana.Meta(auth).SIGNER(),
	}, append(binary.LittleEndian.AppendUint64([]byte{12}, amount), 6)}
}

func (f fixture) honest() *tx {
	p := f.payer.PublicKey()
	return &tx{ixs: []solana.Instruction{
		computeLimit(20_000), computePrice(1),
		transfer(onchain.ATA(p, f.mint, onchain.TokenProgram), f.mint, onchain.ATA(f.offer.PayTo, f.mint, onchain.TokenProgram), p, f.offer.Amount),
		memo("0123456789abcdef0123456789abcdef"),
	}, v0: true, signers: []solana.PrivateKey{f.payer}}
}

// wire builds and partly signs t, the fee payer's signature left empty.
func (f fixture) wire(t testing.TB, b *tx) []byte {
	t.Helper()
	var hash solana.Hash
	hash[0] = 7
	txn, err := solana.NewTransaction(b.ixs, hash, solana.TransactionPayer(f.feePayer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	if b.v0 {
		txn.Message.SetVersion(solana.MessageVersionV0)
	}
	if _, err := txn.PartialSign(func(k solana.PublicKey) *solana.PrivateKey {
		for _, s := range b.signers {
			if s.PublicKey() == k {
				return &s
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := txn.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f fixture) header(wire []byte, accepted Requirements) string {
	b, _ := json.Marshal(map[string]any{"x402Version": 2, "accepted": accepted,
		"payload": map[string]string{"transaction": base64.StdEncoding.EncodeToString(wire)}})
	return base64.StdEncoding.EncodeToString(b)
}

func TestCheck(t *testing.T) {
	f := newFixture()
	p := f.payer.PublicKey()
	payerATA := onchain.ATA(p, f.mint, onchain.TokenProgram)
	treasuryATA := onchain.ATA(f.offer.PayTo, f.mint, onchain.TokenProgram)
	other := key(9)
	cases := []struct {
		name   string
		edit   func(*tx)
		accept func(*Requirements)
		want   string // "" accepts; otherwise a part of the error
	}{
		{name: "honest v0"},
		{name: "honest legacy", edit: func(b *tx) { b.v0 = false }},
		{name: "lighthouse and a second memo", edit: func(b *tx) {
			b.ixs = append(b.ixs, ix{LighthouseProgram, nil, []byte{1}}, memo("x"))
		}},
		{name: "amount short by one", edit: func(b *tx) { b.ixs[2] = transfer(payerATA, f.mint, treasuryATA, p, f.offer.Amount-1) },
			want: "want exactly 1500000"},
		{name: "another mint", edit: func(b *tx) {
			m := other.PublicKey()
			b.ixs[2] = transfer(onchain.ATA(p, m, onchain.TokenProgram), m, onchain.ATA(f.offer.PayTo, m, onchain.TokenProgram), p, f.offer.Amount)
		}, want: "it transfers"},
		{name: "to the payer itself", edit: func(b *tx) { b.ixs[2] = transfer(payerATA, f.mint, payerATA, p, f.offer.Amount) },
			want: "not " + f.offer.PayTo.String()},
		{name: "fee payer's tokens", edit: func(b *tx) {
			fp := f.feePayer.PublicKey()
			b.ixs[2] = transfer(onchain.ATA(fp, f.mint, onchain.TokenProgram), f.mint, treasuryATA, fp, f.offer.Amount)
			// The payer signs a memo, so that the transaction has its
			// two signers.
			b.ixs[3] = ix{onchain.MemoProgram, solana.AccountMetaSlice{solana.Meta(p).SIGNER()}, []byte("m")}
		}, want: "names the fee payer"},
		{name: "fee payer in a memo's accounts", edit: func(b *tx) {
			b.ixs[3] = ix{onchain.MemoProgram, solana.AccountMetaSlice{solana.Meta(f.feePayer.PublicKey())}, []byte("m")}
		}, want: "names the fee payer"},
		{name: "a system transfer after", edit: func(b *tx) {
			b.ixs = append(b.ixs, ix{solana.SystemProgramID, solana.AccountMetaSlice{solana.Meta(p).WRITE().SIGNER(), solana.Meta(other.PublicKey()).WRITE()},
				binary.LittleEndian.AppendUint64([]byte{2, 0, 0, 0}, 1)})
		}, want: "only Memo and Lighthouse"},
		{name: "no memo", edit: func(b *tx) { b.ixs = b.ixs[:3] }, want: "asks for a memo"},
		{name: "memo too long", edit: func(b *tx) { b.ixs[3] = memo(strings.Repeat("m", MaxMemo+1)) }, want: "memo of 257"},
		{name: "seven instructions", edit: func(b *tx) {
			b.ixs = append(b.ixs, memo("a"), memo("b"), memo("c"))
		}, want: "7 instructions"},
		{name: "price over the cap", edit: func(b *tx) { b.ixs[1] = computePrice(MaxMicroLamportsPerCU + 1) }, want: "priority price"},
		{name: "compute limit over the cap", edit: func(b *tx) { b.ixs[0] = computeLimit(MaxComputeUnits + 1) }, want: "compute limit"},
		{name: "no compute limit", edit: func(b *tx) { b.ixs[0] = memo("a") }, want: "SetComputeUnitLimit"},
		{name: "plain Transfer, not checked", edit: func(b *tx) {
			b.ixs[2] = ix{onchain.TokenProgram, solana.AccountMetaSlice{solana.Meta(payerATA).WRITE(), solana.Meta(treasuryATA).WRITE(), solana.Meta(p).SIGNER()},
				binary.LittleEndian.AppendUint64([]byte{3}, f.offer.Amount)}
		}, want: "not a TransferChecked"},
		{name: "payer does not sign", edit: func(b *tx) { b.signers = nil }, want: "does not verify"},
		{name: "signed by another key", edit: func(b *tx) { b.signers = []solana.PrivateKey{other} }, want: "does not verify"},
		{name: "accepted another amount", accept: func(r *Requirements) { r.Amount = "1" }, want: "another offer"},
		{name: "accepted another fee payer", accept: func(r *Requirements) { r.Extra.FeePayer = other.PublicKey().String() }, want: "another offer"},
		{name: "another network", accept: func(r *Requirements) { r.Network = networks["mainnet"] }, want: "network"},
		{name: "another scheme", accept: func(r *Requirements) { r.Scheme = "upto" }, want: "scheme"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := f.honest()
			if c.edit != nil {
				c.edit(b)
			}
			req := f.offer.Requirements(60)
			if c.accept != nil {
				c.accept(&req)
			}
			pay, err := Decode(f.header(f.wire(t, b), req))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Check(pay, f.offer)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Payer != p || got.Amount != f.offer.Amount {
					t.Fatalf("payer %s amount %d", got.Payer, got.Amount)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to say %q", err, c.want)
			}
		})
	}
}

// TestCheckRefusesAWrongFeePayer: a transaction whose fee payer is not
// ours is refused before anything is signed.
func TestCheckRefusesAWrongFeePayer(t *testing.T) {
	f := newFixture()
	theirs := f
	theirs.feePayer = key(8)
	pay, err := Decode(f.header(theirs.wire(t, f.honest()), f.offer.Requirements(60)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Check(pay, f.offer); !errors.Is(err, ErrTransaction) || !strings.Contains(err.Error(), "fee payer is") {
		t.Fatalf("err %v", err)
	}
}

// TestSign: the co-signed transaction decodes and every signature
// verifies; one payment always signs to one transaction id.
func TestSign(t *testing.T) {
	f := newFixture()
	pay, err := Decode(f.header(f.wire(t, f.honest()), f.offer.Requirements(60)))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Check(pay, f.offer)
	if err != nil {
		t.Fatal(err)
	}
	wire, id, err := tr.Sign(f.feePayer)
	if err != nil {
		t.Fatal(err)
	}
	txn, err := solana.TransactionFromBytes(wire)
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.VerifySignatures(); err != nil {
		t.Fatal(err)
	}
	if txn.Signatures[0] != id {
		t.Fatalf("id %s, transaction's first signature %s", id, txn.Signatures[0])
	}
	_, again, _ := tr.Sign(f.feePayer)
	if again != id {
		t.Fatal("signing twice gave two ids")
	}
}

func TestDecode(t *testing.T) {
	f := newFixture()
	wire := f.wire(t, f.honest())
	v1, _ := json.Marshal(map[string]any{"x402Version": 1, "scheme": "exact", "network": "solana-devnet",
		"payload": map[string]string{"transaction": base64.StdEncoding.EncodeToString(wire)}})
	p, err := Decode(base64.StdEncoding.EncodeToString(v1))
	if err != nil || p.Version != 1 || p.Network != networks["devnet"] || p.Scheme != "exact" {
		t.Fatalf("v1: %+v %v", p, err)
	}
	if _, err := Check(p, f.offer); err != nil {
		t.Fatalf("v1 payment: %v", err)
	}
	for name, h := range map[string]string{
		"not base64":     "%%%",
		"not json":       base64.StdEncoding.EncodeToString([]byte("[1]")),
		"version 3":      base64.StdEncoding.EncodeToString([]byte(`{"x402Version":3}`)),
		"v2 no accepted": base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"payload":{"transaction":"AA=="}}`)),
		"no transaction": base64.StdEncoding.EncodeToString([]byte(`{"x402Version":1,"scheme":"exact","network":"solana"}`)),
		"oversized":      strings.Repeat("A", MaxHeader+4),
	} {
		if _, err := Decode(h); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestNetwork(t *testing.T) {
	for in, want := range map[string]string{"mainnet": networks["mainnet"], "devnet": networks["devnet"], networks["testnet"]: networks["testnet"]} {
		if got, err := Network(in); err != nil || got != want {
			t.Errorf("%s: %s %v", in, got, err)
		}
	}
	if _, err := Network("localnet"); err == nil {
		t.Error("localnet has no x402 network id")
	}
}

// FuzzCheck feeds payment headers, as they come off the network, to Decode
// and Check: nothing panics, and whatever passes Check signs into a
// transaction whose every signature verifies. testdata/fuzz/FuzzCheck
// holds an honest payment (TestWriteFuzzSeed writes it).
func FuzzCheck(f *testing.F) {
	fx := newFixture()
	f.Add("")
	f.Add(base64.StdEncoding.EncodeToString([]byte(`{"x402Version":2,"accepted":{},"payload":{"transaction":"AQ=="}}`)))
	f.Fuzz(func(t *testing.T, header string) {
		p, err := Decode(header)
		if err != nil {
			return
		}
		tr, err := Check(p, fx.offer)
		if err != nil {
			return
		}
		wire, _, err := tr.Sign(fx.feePayer)
		if err != nil {
			t.Fatal(err)
		}
		txn, err := solana.TransactionFromBytes(wire)
		if err != nil {
			t.Fatalf("a checked payment signs into an undecodable transaction: %v", err)
		}
		if err := txn.VerifySignatures(); err != nil {
			t.Fatalf("a checked payment signs into a transaction that does not verify: %v", err)
		}
	})
}

// TestWriteFuzzSeed keeps FuzzCheck's seed an honest payment of the
// fixture (go test -run TestWriteFuzzSeed -update rewrites it).
func TestWriteFuzzSeed(t *testing.T) {
	fx := newFixture()
	h := fx.header(fx.wire(t, fx.honest()), fx.offer.Requirements(60))
	path := filepath.Join("testdata", "fuzz", "FuzzCheck", "honest")
	want := fmt.Sprintf("go test fuzz v1\nstring(%q)\n", h)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Fatalf("%s is stale (go test -run TestWriteFuzzSeed -update): %v", path, err)
	}
}

var update = flag.Bool("update", false, "rewrite testdata")
