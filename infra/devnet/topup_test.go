package devnet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/x402"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// topUpChain is a local chain with a treasury that takes USDC, a fee
// payer with SOL, and a gateway that takes deposits and top-ups on it.
type topUpChain struct {
	*svmtest.Env
	feePayer solana.PrivateKey
}

func newTopUpChain(t *testing.T) *topUpChain {
	chain := svmtest.NewEnv(t)
	c := &topUpChain{Env: chain, feePayer: svmtest.NewKey(t)}
	chain.Airdrop(t, c.feePayer.PublicKey(), 1_000_000_000)
	chain.MintTo(t, chain.Config.USDCMint, onchain.TokenProgram, chain.Config.Treasury, 0)
	return c
}

func (c *topUpChain) options(t *testing.T, wait time.Duration) (*api.Deposits, *api.TopUps) {
	network, err := x402.Network("devnet")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.Config
	return &api.Deposits{Mint: cfg.USDCMint, Treasury: cfg.Treasury, Verifier: &deposit.Verifier{RPC: c.RPC, Config: cfg},
			Lister: c.RPC, Label: "c0mpute"},
		&api.TopUps{Network: network, FeePayer: c.feePayer, Chain: c.RPC, Wait: wait}
}

// TestX402TopUp: an agent holding only a keypair and USDC — no SOL, no
// account, no key — tops up with the official x402 client (@x402/fetch +
// @x402/svm) and gets a completion from the official OpenAI SDK
// (infra/sdktest/node/x402.test.mjs). Afterwards the chain shows exactly
// one transfer of 2.5 USDC to the treasury, the fee paid by our fee
// payer, and the agent's ledger one deposit of 250 credits.
func TestX402TopUp(t *testing.T) {
	node, dir := nodeHarness(t, "@x402/fetch", "@x402/svm", "@solana/kit", "openai")
	chain := newTopUpChain(t)
	cfg := chain.Config
	agent := svmtest.NewKey(t)
	agentUSDC := chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, agent.PublicKey(), 10_000_000)
	deposits, topUps := chain.options(t, 20*time.Second)
	e := newEnv(t, envOptions{deposits: deposits, topUps: topUps})
	e.ollamaWorker()
	feeBefore := balanceOf(t, chain, chain.feePayer.PublicKey())

	runNodeTest(t, node, dir, "x402.test.mjs", 3, "C0MPUTE_API="+e.stack.APIURL, "C0MPUTE_RPC_URL="+chain.URL,
		"C0MPUTE_AGENT_KEY="+keypairJSON(agent), "C0MPUTE_MODEL="+tinyModel)

	if got := chain.TokenBalance(t, cfg.TreasuryUSDC()); got != 2_500_000 {
		t.Errorf("treasury holds %d USDC units, want 2500000 (one top-up)", got)
	}
	if got := chain.TokenBalance(t, agentUSDC); got != 7_500_000 {
		t.Errorf("agent holds %d USDC units, want 7500000", got)
	}
	// One transaction of the official client's: two signatures at 5,000
	// lamports and 20,000 compute units at 1 micro-lamport (1 lamport,
	// rounded up).
	if fee := feeBefore - balanceOf(t, chain, chain.feePayer.PublicKey()); fee != 10_001 {
		t.Errorf("the fee payer spent %d lamports, want one transaction's fee (10001)", fee)
	}
	if got := balanceOf(t, chain, agent.PublicKey()); got != 0 {
		t.Errorf("the agent holds %d lamports: it needed none", got)
	}
	acct, err := e.store.GetAccount(context.Background(), agent.PublicKey().String())
	if err != nil {
		t.Fatal(err)
	}
	price := e.stack.Catalog.Models()[0].Price
	if acct.Wallet != agent.PublicKey().String() || acct.TotalDeposited != 250 || acct.Credits != 250-price {
		t.Errorf("agent's account %+v, want 250 deposited and one completion of %d spent", acct, price)
	}
	entries, err := e.store.Entries(context.Background(), acct.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	credits := 0
	for _, en := range entries {
		if en.Kind == store.EntryDeposit {
			credits++
			if en.Credits != 250 {
				t.Errorf("deposit entry of %d credits", en.Credits)
			}
		}
	}
	if credits != 1 {
		t.Errorf("%d deposit entries, want 1: %+v", credits, entries)
	}
}

func balanceOf(t *testing.T, chain *topUpChain, k solana.PublicKey) uint64 {
	t.Helper()
	b, err := chain.RPC.GetBalance(context.Background(), k, "")
	if err != nil {
		t.Fatal(err)
	}
	return b.Value
}

// payment is what the official client sends for a top-up of amount base
// units by agent (the same instructions, in the same order), as a
// PAYMENT-SIGNATURE header.
func (c *topUpChain) payment(t *testing.T, e *env, agent solana.PrivateKey, amount uint64) string {
	t.Helper()
	cfg := c.Config
	resp := e.do(http.MethodPost, fmt.Sprintf("/v1/x402/top-up?amount=%s", usdc(amount)), "", nil)
	resp.Body.Close()
	var req x402.Required
	raw, err := base64.StdEncoding.DecodeString(resp.Header.Get(x402.HeaderRequired))
	if err != nil || json.Unmarshal(raw, &req) != nil || resp.StatusCode != http.StatusPaymentRequired || len(req.Accepts) != 1 {
		t.Fatalf("402: %d %s", resp.StatusCode, raw)
	}
	bh, err := c.RPC.GetLatestBlockhash(context.Background(), rpc.CommitmentFinalized)
	if err != nil {
		t.Fatal(err)
	}
	memo, err := onchain.Memo(fmt.Sprintf("%x", time.Now().UnixNano()))
	if err != nil {
		t.Fatal(err)
	}
	ixs := []solana.Instruction{onchain.SetComputeUnitLimit(20_000), onchain.SetComputeUnitPrice(1),
		onchain.TransferChecked(onchain.TokenProgram, cfg.USDCATA(agent.PublicKey()), cfg.USDCMint, cfg.TreasuryUSDC(), agent.PublicKey(), amount, 6),
		memo}
	tx, err := solana.NewTransaction(ixs, bh.Value.Blockhash, solana.TransactionPayer(c.feePayer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	tx.Message.SetVersion(solana.MessageVersionV0)
	if _, err := tx.PartialSign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == agent.PublicKey() {
			return &agent
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wire, err := tx.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"x402Version": 2, "resource": req.Resource, "accepted": req.Accepts[0],
		"payload": map[string]string{"transaction": base64.StdEncoding.EncodeToString(wire)}})
	return base64.StdEncoding.EncodeToString(body)
}

func usdc(units uint64) string { return fmt.Sprintf("%d.%06d", units/1_000_000, units%1_000_000) }

type topUpAnswer struct {
	status  int
	settled x402.Settlement
	reason  string // the 402's error
	body    struct {
		AccountID   string `json:"account_id"`
		State       string `json:"state"`
		Transaction string `json:"transaction"`
		CreditedNow int64  `json:"credited_now"`
		Credits     int64  `json:"credits"`
		APIKey      string `json:"api_key"`
		Error       *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
}

func postTopUp(t *testing.T, e *env, amount uint64, header string) topUpAnswer {
	t.Helper()
	return postTopUpAs(t, e, amount, x402.HeaderSignature, header)
}

// postTopUpAs sends the payment in the named header (v1's X-PAYMENT, or
// v2's PAYMENT-SIGNATURE).
func postTopUpAs(t *testing.T, e *env, amount uint64, name, header string) topUpAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.stack.APIURL+"/x402/top-up?amount="+usdc(amount), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(name, header)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a topUpAnswer
	a.status = resp.StatusCode
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &a.body)
	h := resp.Header.Get(x402.HeaderResponse)
	if name == x402.HeaderV1Payment {
		h = resp.Header.Get(x402.HeaderV1Response)
	}
	if h != "" {
		raw, _ := base64.StdEncoding.DecodeString(h)
		_ = json.Unmarshal(raw, &a.settled)
	}
	if h := resp.Header.Get(x402.HeaderRequired); h != "" {
		var r x402.Required
		raw, _ := base64.StdEncoding.DecodeString(h)
		_ = json.Unmarshal(raw, &r)
		a.reason = r.Error
	}
	return a
}

// crashingStore fails one write of a top-up, before it happens or after
// (the write done, its answer lost), as a process killed there would.
type crashingStore struct {
	store.Store
	method string
	after  bool
	armed  atomic.Bool // set once the test's setup is done
	fired  atomic.Bool
}

var errInjected = errors.New("injected crash")

func (c *crashingStore) crash(method string, write func() error) error {
	if method != c.method || !c.armed.Load() || c.fired.Swap(true) {
		return write()
	}
	if c.after {
		if err := write(); err != nil {
			return err
		}
	}
	return errInjected
}

func (c *crashingStore) CreateAccount(ctx context.Context, a store.Account) error {
	return c.crash("CreateAccount", func() error { return c.Store.CreateAccount(ctx, a) })
}

func (c *crashingStore) PutDeposit(ctx context.Context, d store.Deposit) error {
	return c.crash("PutDeposit", func() error { return c.Store.PutDeposit(ctx, d) })
}

func (c *crashingStore) CreditDeposit(ctx context.Context, dc store.DepositCredit) (d store.Deposit, applied bool, err error) {
	err = c.crash("CreditDeposit", func() (e error) { d, applied, e = c.Store.CreditDeposit(ctx, dc); return e })
	return d, applied, err
}

func (c *crashingStore) PutAPIKey(ctx context.Context, k store.Secret) error {
	return c.crash("PutAPIKey", func() error { return c.Store.PutAPIKey(ctx, k) })
}

// TestX402TopUpFaults: a top-up whose gateway dies at any write (before
// it or with its answer lost), whose send answer is lost, or that does not
// finalize in time, is credited exactly once — by the client's retry of
// the same payment or by the sweep; the same payment sent eight times at
// once moves USDC and credits once; a payment that cannot land costs no
// write and no fee; another wallet cannot claim a transfer.
func TestX402TopUpFaults(t *testing.T) {
	chain := newTopUpChain(t)
	cfg := chain.Config
	const amount = 1_000_000 // 100 credits
	newAgent := func(usdcUnits uint64) solana.PrivateKey {
		a := svmtest.NewKey(t)
		chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, a.PublicKey(), usdcUnits)
		return a
	}
	// credited checks the agent's account holds exactly one credit of the
	// payment and the treasury got its USDC once.
	treasury := uint64(0)
	credited := func(e *env, agent solana.PrivateKey, what string) {
		t.Helper()
		treasury += amount
		if got := chain.TokenBalance(t, cfg.TreasuryUSDC()); got != treasury {
			t.Errorf("%s: treasury holds %d, want %d", what, got, treasury)
		}
		a, err := e.store.GetAccount(context.Background(), agent.PublicKey().String())
		if err != nil || a.Credits != 100 || a.TotalDeposited != 100 {
			t.Errorf("%s: account %+v (%v), want 100 credits deposited once", what, a, err)
		}
	}

	// gateway is a fresh gateway on the chain whose top-ups wait that
	// long for finality.
	gateway := func(t *testing.T, wait time.Duration) *env {
		deposits, topUps := chain.options(t, wait)
		return newEnv(t, envOptions{deposits: deposits, topUps: topUps})
	}

	for _, method := range []string{"CreateAccount", "PutDeposit", "CreditDeposit", "PutAPIKey"} {
		for _, after := range []bool{false, true} {
			t.Run(fmt.Sprintf("crash at %s, after=%v", method, after), func(t *testing.T) {
				cs := &crashingStore{Store: openStore(t), method: method, after: after}
				deposits, topUps := chain.options(t, 10*time.Second)
				e := newEnv(t, envOptions{store: cs, deposits: deposits, topUps: topUps})
				cs.armed.Store(true)
				agent := newAgent(amount)
				pay := chain.payment(t, e, agent, amount)
				first := postTopUp(t, e, amount, pay)
				if !cs.fired.Load() {
					t.Fatalf("the crash at %s never fired", method)
				}
				if method == "PutAPIKey" {
					// The credit is done when the key is made: the answer
					// stands, without a key.
					if first.status != http.StatusOK || first.body.APIKey != "" || first.body.CreditedNow != 100 {
						t.Fatalf("crash at the key: %d %+v", first.status, first.body)
					}
				} else if first.status != http.StatusInternalServerError {
					t.Fatalf("the crashed try answered %d %+v", first.status, first.body)
				}
				again := postTopUp(t, e, amount, pay)
				if again.status != http.StatusOK || again.body.State != "credited" || !again.settled.Success {
					t.Fatalf("retry: %d %+v %s", again.status, again.body, again.reason)
				}
				credited(e, agent, "after the retry")
			})
		}
	}

	t.Run("v1 client", func(t *testing.T) {
		e := gateway(t, 10*time.Second)
		// v1 reads the offer from the body.
		resp := e.do(http.MethodPost, "/v1/x402/top-up?amount=1", "", nil)
		var offer struct {
			X402Version int `json:"x402Version"`
			Accepts     []struct {
				Network           string `json:"network"`
				MaxAmountRequired string `json:"maxAmountRequired"`
				PayTo             string `json:"payTo"`
			} `json:"accepts"`
		}
		err := json.NewDecoder(resp.Body).Decode(&offer)
		resp.Body.Close()
		if err != nil || offer.X402Version != 1 || len(offer.Accepts) != 1 || offer.Accepts[0].Network != "solana-devnet" ||
			offer.Accepts[0].MaxAmountRequired != "1000000" || offer.Accepts[0].PayTo != cfg.Treasury.String() {
			t.Fatalf("v1 offer %+v (%v)", offer, err)
		}
		agent := newAgent(amount)
		var v2 struct {
			Payload json.RawMessage `json:"payload"`
		}
		raw, _ := base64.StdEncoding.DecodeString(chain.payment(t, e, agent, amount))
		if err := json.Unmarshal(raw, &v2); err != nil {
			t.Fatal(err)
		}
		v1, _ := json.Marshal(map[string]any{"x402Version": 1, "scheme": "exact", "network": "solana-devnet", "payload": v2.Payload})
		a := postTopUpAs(t, e, amount, x402.HeaderV1Payment, base64.StdEncoding.EncodeToString(v1))
		if a.status != http.StatusOK || a.body.CreditedNow != 100 || !a.settled.Success || a.settled.Payer != agent.PublicKey().String() {
			t.Fatalf("v1 payment: %d %+v %+v %q", a.status, a.body, a.settled, a.reason)
		}
		credited(e, agent, "v1 client")
	})

	t.Run("send answer lost", func(t *testing.T) {
		e := gateway(t, 10*time.Second)
		agent := newAgent(amount)
		pay := chain.payment(t, e, agent, amount)
		chain.LoseResponses(t, 1)
		if a := postTopUp(t, e, amount, pay); a.status != http.StatusOK || a.body.CreditedNow != 100 {
			t.Fatalf("%d %+v", a.status, a.body)
		}
		credited(e, agent, "lost send answer")
	})

	t.Run("not finalized in time, then swept", func(t *testing.T) {
		e := gateway(t, 300*time.Millisecond)
		agent := newAgent(amount)
		pay := chain.payment(t, e, agent, amount)
		chain.HoldFinality(t, true)
		a := postTopUp(t, e, amount, pay)
		chain.Finalize(t)
		chain.HoldFinality(t, false)
		if a.status != http.StatusAccepted || a.body.State != "pending" || a.body.CreditedNow != 0 ||
			a.settled.Success || a.settled.ErrorReason != "settlement_pending" || a.body.APIKey == "" {
			t.Fatalf("want 202 pending, with a key (this call moved the money): %d %+v %+v", a.status, a.body, a.settled)
		}
		// A wallet pays one top-up at a time: another payment while this
		// one settles is refused, and moves nothing.
		// Enough for a second one (amount+1: the same mint again would be
		// the same transaction, which the chain takes once).
		chain.MintTo(t, cfg.USDCMint, onchain.TokenProgram, agent.PublicKey(), amount+1)
		if b := postTopUp(t, e, amount, chain.payment(t, e, agent, amount)); b.status != http.StatusPaymentRequired ||
			b.settled.ErrorReason != "settlement_pending" || !strings.Contains(b.reason, "another top-up") {
			t.Fatalf("a second top-up while one settles: %d %+v %q", b.status, b.settled, b.reason)
		}

		if n, err := e.stack.SweepDeposits(context.Background()); err != nil || n != 1 {
			t.Fatalf("sweep credited %d (%v), want 1", n, err)
		}
		if n, err := e.stack.SweepDeposits(context.Background()); err != nil || n != 0 {
			t.Fatalf("second sweep credited %d (%v), want 0", n, err)
		}
		if again := postTopUp(t, e, amount, pay); again.status != http.StatusOK || again.body.CreditedNow != 0 {
			t.Fatalf("retry after the sweep: %d %+v", again.status, again.body)
		}
		credited(e, agent, "swept")
	})

	t.Run("eight at once", func(t *testing.T) {
		e := gateway(t, 10*time.Second)
		agent := newAgent(amount)
		pay := chain.payment(t, e, agent, amount)
		var wg sync.WaitGroup
		answers := make([]topUpAnswer, 8)
		for i := range answers {
			wg.Go(func() { answers[i] = postTopUp(t, e, amount, pay) })
		}
		wg.Wait()
		total, keys := int64(0), 0
		for i, a := range answers {
			if a.status != http.StatusOK {
				t.Errorf("try %d: %d %+v", i, a.status, a.body)
			}
			total += a.body.CreditedNow
			if a.body.APIKey != "" {
				keys++
			}
		}
		if total != 100 || keys != 1 {
			t.Errorf("the tries credited %d in all and got %d keys, want 100 and 1 (the try that settled it)", total, keys)
		}
		credited(e, agent, "eight at once")
	})

	t.Run("replays get no key", func(t *testing.T) {
		e := gateway(t, 10*time.Second)
		agent := newAgent(amount)
		pay := chain.payment(t, e, agent, amount)
		first := postTopUp(t, e, amount, pay)
		if first.status != http.StatusOK || first.body.APIKey == "" {
			t.Fatalf("first: %d %+v", first.status, first.body)
		}
		credited(e, agent, "replays")
		// The payment again, and the landed transaction copied off the
		// chain with the fee payer's signature blanked: anyone can make
		// both, so neither may yield a key.
		landed, err := chain.RPC.GetTransaction(context.Background(), solana.MustSignatureFromBase58(first.body.Transaction),
			&rpc.GetTransactionOpts{Encoding: solana.EncodingBase64, MaxSupportedTransactionVersion: new(uint64(0))})
		if err != nil {
			t.Fatal(err)
		}
		wire := landed.Transaction.GetBinary()
		copy(wire[1:65], make([]byte, 64))
		var orig struct {
			Accepted x402.Requirements `json:"accepted"`
		}
		raw, _ := base64.StdEncoding.DecodeString(pay)
		_ = json.Unmarshal(raw, &orig)
		body, _ := json.Marshal(map[string]any{"x402Version": 2, "accepted": orig.Accepted,
			"payload": map[string]string{"transaction": base64.StdEncoding.EncodeToString(wire)}})
		for name, h := range map[string]string{"the payment again": pay, "copied off the chain": base64.StdEncoding.EncodeToString(body)} {
			a := postTopUp(t, e, amount, h)
			if a.status != http.StatusOK || a.body.APIKey != "" || a.body.CreditedNow != 0 {
				t.Errorf("%s: %d %+v, want 200, nothing credited, no key", name, a.status, a.body)
			}
		}
		treasury -= amount // credited adds the payment again: it is the same one
		credited(e, agent, "after the replays")
	})

	t.Run("refused payments", func(t *testing.T) {
		e := gateway(t, 10*time.Second)
		fee := balanceOf(t, chain, chain.feePayer.PublicKey())
		poor := newAgent(amount - 1) // cannot cover it: the simulation fails
		a := postTopUp(t, e, amount, chain.payment(t, e, poor, amount))
		if a.status != http.StatusPaymentRequired || a.settled.Success || !strings.Contains(a.reason, "would fail") {
			t.Errorf("a payment that cannot land: %d %+v %q", a.status, a.settled, a.reason)
		}
		if _, err := e.store.GetAccount(context.Background(), poor.PublicKey().String()); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("a refused payment made an account: %v", err)
		}
		rich := newAgent(10 * amount)
		// Paid for 1 USDC, presented for 2.
		a = postTopUp(t, e, 2*amount, chain.payment(t, e, rich, amount))
		if a.status != http.StatusPaymentRequired || !strings.Contains(a.reason, "another offer") {
			t.Errorf("a payment for another amount: %d %q", a.status, a.reason)
		}
		for name, h := range map[string]string{"garbage": "!!", "empty json": base64.StdEncoding.EncodeToString([]byte("{}"))} {
			if a := postTopUp(t, e, amount, h); a.status != http.StatusPaymentRequired || a.reason == "" {
				t.Errorf("%s: %d %q", name, a.status, a.reason)
			}
		}
		if got := balanceOf(t, chain, chain.feePayer.PublicKey()); got != fee {
			t.Errorf("refused payments cost the fee payer %d lamports", fee-got)
		}
		if got := chain.TokenBalance(t, cfg.TreasuryUSDC()); got != treasury {
			t.Errorf("refused payments moved USDC: treasury %d, want %d", got, treasury)
		}
	})
}
