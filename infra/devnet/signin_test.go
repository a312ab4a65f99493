package devnet_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/functions/store"
)

// postJSON sends a JSON body without a key and decodes the answer.
func (e *env) postJSON(path string, body, out any) int {
	e.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	resp := e.post("/v1"+path, "", b)
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		e.t.Fatalf("POST %s: %v", path, err)
	}
	return resp.StatusCode
}

type signInAnswer struct {
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
	Created   bool   `json:"created"`
	APIKey    string `json:"api_key"`
	Error     *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wallet signs in as the Wallet Standard's solana:signIn does: it takes
// the challenge, fills in its address, signs the message text.
type wallet struct {
	key  ed25519.PrivateKey
	addr string
}

func newWallet(t *testing.T) wallet {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return wallet{key: key, addr: base58.Encode(key.Public().(ed25519.PublicKey))}
}

func (w wallet) sign(in siws.Input) (msg, sig []byte) {
	in.Address = w.addr
	msg = []byte(siws.Message(in))
	return msg, ed25519.Sign(w.key, msg)
}

// standardForm is the verify body as solana:signIn's output, in base64.
func (w wallet) standardForm(in siws.Input, msg, sig []byte) map[string]any {
	b64 := base64.StdEncoding.EncodeToString
	return map[string]any{"input": in, "output": map[string]any{
		"account":       map[string]any{"publicKey": b64(w.key.Public().(ed25519.PublicKey)), "address": w.addr, "chains": []string{"solana:localnet"}},
		"signedMessage": b64(msg), "signature": b64(sig), "signatureType": "ed25519"}}
}

// TestSignInWithSolana: a wallet signs in (account made at the first, its
// wallet the one proven), gets an API key that works, and can sign in
// again in the plain form; a replayed, misdirected or forged sign-in is
// refused with 401 and makes nothing.
func TestSignInWithSolana(t *testing.T) {
	e := newEnv(t, envOptions{})
	alice, bob := newWallet(t), newWallet(t)

	var in siws.Input
	if code := e.postJSON("/auth/siws/challenge", map[string]any{}, &in); code != http.StatusOK || in.Nonce == "" ||
		in.Domain != strings.TrimPrefix(strings.TrimSuffix(e.stack.APIURL, "/v1"), "http://") || in.ChainID != "localnet" || in.Version != "1" {
		t.Fatalf("challenge: %d %+v", code, in)
	}
	msg, sig := alice.sign(in)
	var got signInAnswer
	if code := e.postJSON("/auth/siws/verify", alice.standardForm(in, msg, sig), &got); code != http.StatusOK ||
		got.AccountID != alice.addr || got.Wallet != alice.addr || !got.Created || !strings.HasPrefix(got.APIKey, "sk-") {
		t.Fatalf("sign-in: %d %+v", code, got)
	}
	var bal struct {
		Credits int64 `json:"credits"`
	}
	if code := e.call(http.MethodGet, "/balance", got.APIKey, &bal); code != http.StatusOK || bal.Credits != 0 {
		t.Errorf("balance with the sign-in key: %d %+v", code, bal)
	}
	if a, err := e.store.GetAccount(t.Context(), alice.addr); err != nil || a.Wallet != alice.addr {
		t.Errorf("the account: %+v, %v; want its wallet proven", a, err)
	}

	refused := func(name string, body any, why string) {
		t.Helper()
		var got signInAnswer
		code := e.postJSON("/auth/siws/verify", body, &got)
		if code != http.StatusUnauthorized || got.Error == nil || got.Error.Code != "invalid_sign_in" || !strings.Contains(got.Error.Message, why) {
			t.Errorf("%s: %d %+v; want 401 invalid_sign_in mentioning %q", name, code, got.Error, why)
		}
	}
	refused("the same sign-in again", alice.standardForm(in, msg, sig), "used already")

	var forBob siws.Input
	e.postJSON("/auth/siws/challenge", map[string]any{"wallet": bob.addr}, &forBob)
	m, s := alice.sign(forBob)
	refused("a challenge issued to another wallet", alice.standardForm(forBob, m, s), "nonce")

	var fresh siws.Input
	e.postJSON("/auth/siws/challenge", nil, &fresh)
	m, _ = bob.sign(fresh)
	_, s = alice.sign(fresh)
	refused("a message signed by another key", bob.standardForm(fresh, m, s), "signature")
	evil := fresh
	evil.Domain = "evil.example"
	m, s = alice.sign(evil)
	refused("another site's message", alice.standardForm(evil, m, s), "domain")

	// The plain form: a wallet that signs the text it is given.
	var again siws.Input
	e.postJSON("/auth/siws/challenge", map[string]any{"wallet": alice.addr}, &again)
	m, s = alice.sign(again)
	got = signInAnswer{}
	if code := e.postJSON("/auth/siws/verify", map[string]any{"wallet": alice.addr, "message": string(m), "signature": base58.Encode(s)}, &got); code != http.StatusOK ||
		got.AccountID != alice.addr || got.Created {
		t.Fatalf("second sign-in, plain form: %d %+v", code, got)
	}
	if keys, err := e.store.ListAPIKeys(t.Context(), alice.addr); err != nil || len(keys) != 2 {
		t.Errorf("alice's keys: %d, %v; want one per sign-in", len(keys), err)
	}
	// Past 5 active keys, a sign-in replaces the oldest sign-in key: a
	// wallet that lost its keys is never locked out.
	for range 5 {
		var ch siws.Input
		e.postJSON("/auth/siws/challenge", map[string]any{}, &ch)
		m, s := alice.sign(ch)
		var ok signInAnswer
		if code := e.postJSON("/auth/siws/verify", alice.standardForm(ch, m, s), &ok); code != http.StatusOK {
			t.Fatalf("sign-in past the key limit: %d %+v", code, ok.Error)
		}
	}
	active := 0
	keys, _ := e.store.ListAPIKeys(t.Context(), alice.addr)
	for _, k := range keys {
		if k.Active() {
			active++
		}
	}
	if active != store.MaxActiveKeys || len(keys) != 7 || keys[0].Active() {
		t.Errorf("after 7 sign-ins: %d keys, %d active; want the oldest revoked and %d active", len(keys), active, store.MaxActiveKeys)
	}
	// Refusals made nothing: no account for bob.
	if _, err := e.store.GetAccount(t.Context(), bob.addr); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("bob's account after refused sign-ins: %v; want none", err)
	}
}

// TestSignInFromJS signs in from a wallet's side with Solana's own JS
// libraries (infra/sdktest/node/signin.test.mjs): a @solana/web3.js
// keypair, the Wallet Standard's reference message builder and verifier,
// tweetnacl's signature.
func TestSignInFromJS(t *testing.T) {
	node, dir := nodeHarness(t, "tweetnacl", "@solana/web3.js", "@solana/wallet-standard-util", "bs58")
	e := newEnv(t, envOptions{})
	runNodeTest(t, node, dir, "signin.test.mjs", 3, "C0MPUTE_API="+e.stack.APIURL)
}
