package svmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/infra/testenv"
)

// Dir is this folder, where package.json and node_modules live.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// IDL is the path of an IDL in onchain/idl.
func IDL(name string) string { return filepath.Join(Dir(), "..", "idl", name+".json") }

// requireNode skips (or fails) the test when node or the npm packages are
// missing, and returns node's path.
func requireNode(t testing.TB) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "node is not on PATH")
	}
	for _, pkg := range []string{"litesvm", "@coral-xyz/anchor", "@pump-fun/pump-swap-sdk"} {
		if _, err := os.Stat(filepath.Join(Dir(), "node_modules", pkg, "package.json")); err != nil {
			testenv.Missing(t, "svmtest npm packages", "run `npm ci` in onchain/svmtest")
		}
	}
	return node
}

// Harness is a running LiteSVM JSON-RPC server.
type Harness struct {
	URL string
	// WSURL is its WebSocket endpoint (signatureSubscribe).
	WSURL string
	RPC   *rpc.Client
}

// Start runs server.mjs for the test and stops it when the test ends.
func Start(t testing.TB) *Harness {
	t.Helper()
	node := requireNode(t)
	cmd := exec.Command(node, "server.mjs")
	cmd.Dir = Dir()
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("svmtest: stdin: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("svmtest: stdout: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("svmtest: start node: %v", err)
	}
	// Closing stdin is the server's signal to exit.
	t.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
	}()
	var hello struct {
		URL   string `json:"url"`
		WSURL string `json:"ws_url"`
	}
	select {
	case l, ok := <-line:
		if !ok || json.Unmarshal([]byte(l), &hello) != nil || hello.URL == "" {
			t.Fatalf("svmtest: server did not announce its address (got %q)", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("svmtest: server did not start within 30s")
	}
	return &Harness{URL: hello.URL, WSURL: hello.WSURL, RPC: rpc.New(hello.URL)}
}

// Call invokes a JSON-RPC method, for the svm_* controls.
func (h *Harness) Call(t testing.TB, method string, params ...any) json.RawMessage {
	t.Helper()
	var out json.RawMessage
	if params == nil {
		params = []any{}
	}
	if err := h.RPC.RPCCallForInto(context.Background(), &out, method, params); err != nil {
		t.Fatalf("svmtest: %s: %v", method, err)
	}
	return out
}

// Airdrop gives addr lamports.
func (h *Harness) Airdrop(t testing.TB, addr solana.PublicKey, lamports uint64) {
	t.Helper()
	h.Call(t, "svm_airdrop", addr.String(), lamports)
}

// SetAccount writes an account as it is, owned by owner.
func (h *Harness) SetAccount(t testing.TB, addr, owner solana.PublicKey, data []byte) {
	t.Helper()
	h.Call(t, "svm_setAccount", map[string]any{
		"pubkey": addr.String(), "owner": owner.String(), "data": base64.StdEncoding.EncodeToString(data),
	})
}

// Account is an account to write with SetAccounts.
type Account struct {
	Address, Owner solana.PublicKey
	Data           []byte
}

// SetAccounts writes accounts as they are, in one call (SetAccount for
// many: thousands of stake accounts in a benchmark).
func (h *Harness) SetAccounts(t testing.TB, as []Account) {
	t.Helper()
	const chunk = 2000 // keeps each request a few hundred kB
	for i := 0; i < len(as); i += chunk {
		var batch []map[string]any
		for _, a := range as[i:min(i+chunk, len(as))] {
			batch = append(batch, map[string]any{
				"pubkey": a.Address.String(), "owner": a.Owner.String(), "data": base64.StdEncoding.EncodeToString(a.Data),
			})
		}
		h.Call(t, "svm_setAccounts", batch)
	}
}

// SetFinality makes transactions that land from now on finalized d after
// they land (confirmed at once), as a live cluster's ~13 s; 0, the
// default, finalizes them at once.
func (h *Harness) SetFinality(t testing.TB, d time.Duration) {
	h.Call(t, "svm_setFinalityMs", d.Milliseconds())
}

// DropSends makes the next n sends that pass preflight answer with their
// signature and never land, as a transaction lost on its way to the leader.
func (h *Harness) DropSends(t testing.TB, n int) { h.Call(t, "svm_dropSends", n) }

// HoldFinality keeps new transactions "confirmed" (not finalized) until
// Finalize.
func (h *Harness) HoldFinality(t testing.TB, on bool) { h.Call(t, "svm_holdFinality", on) }

// Finalize finalizes every landed transaction.
func (h *Harness) Finalize(t testing.TB) { h.Call(t, "svm_finalize") }

// LoseResponses makes the next n sends land but answer with an error, as
// a response lost on the way back does.
func (h *Harness) LoseResponses(t testing.TB, n int) { h.Call(t, "svm_loseResponses", n) }

// HideLanded makes the next n landed transactions invisible to status and
// transaction lookups until Reveal: a confirmation that times out.
func (h *Harness) HideLanded(t testing.TB, n int) { h.Call(t, "svm_hideLanded", n) }

// Reveal makes every hidden transaction visible.
func (h *Harness) Reveal(t testing.TB) { h.Call(t, "svm_reveal") }

// AdvanceBlocks lets n blocks pass; past 150 the blockhash expires.
func (h *Harness) AdvanceBlocks(t testing.TB, n int) { h.Call(t, "svm_advanceBlocks", n) }

// SetUnixTime sets the cluster clock.
func (h *Harness) SetUnixTime(t testing.TB, unix int64) { h.Call(t, "svm_setUnixTime", unix) }

// TransactionCount is how many transactions landed.
func (h *Harness) TransactionCount(t testing.TB) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(h.Call(t, "svm_transactionCount"), &n); err != nil {
		t.Fatalf("svmtest: transaction count: %v", err)
	}
	return n
}

// Case is one thing for encode.mjs to encode (see encode.mjs).
type Case struct {
	Kind     string            `json:"kind"`
	Name     string            `json:"name"`
	Args     map[string]any    `json:"args,omitempty"`
	Accounts map[string]string `json:"accounts,omitempty"`
	Value    map[string]any    `json:"value,omitempty"`
}

// Meta is an account meta as Anchor built it.
type Meta struct {
	Pubkey   string `json:"pubkey"`
	Signer   bool   `json:"signer"`
	Writable bool   `json:"writable"`
}

// Encoded is Anchor's encoding of a Case.
type Encoded struct {
	Data    string `json:"data"`
	Program string `json:"program,omitempty"`
	Keys    []Meta `json:"keys,omitempty"`
}

// Encode encodes cases with @coral-xyz/anchor from the IDL at idlPath,
// with the program deployed at address (empty: the IDL's address).
func Encode(t testing.TB, idlPath, address string, cases []Case) []Encoded {
	t.Helper()
	node := requireNode(t)
	in, err := json.Marshal(map[string]any{"idl": idlPath, "address": address, "cases": cases})
	if err != nil {
		t.Fatalf("svmtest: encode input: %v", err)
	}
	return runNode[[]Encoded](t, node, "encode.mjs", in)
}

func runNode[T any](t testing.TB, node, script string, in []byte) T {
	t.Helper()
	cmd := exec.Command(node, script)
	cmd.Dir = Dir()
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("svmtest: node %s: %v\n%s", script, err, stderr.String())
	}
	var v T
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("svmtest: node %s output: %v: %s", script, err, fmt.Sprintf("%.500s", out))
	}
	return v
}

// PumpBuy builds PumpSwap buy instructions with the official SDK (see
// pumpbuy.mjs for the input).
func PumpBuy(t testing.TB, input any) []Encoded {
	t.Helper()
	node := requireNode(t)
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatalf("svmtest: pumpbuy input: %v", err)
	}
	return runNode[[]Encoded](t, node, "pumpbuy.mjs", in)
}

// PumpQuote is the official PumpSwap SDK's quote of a buy (pumpquote.mjs).
type PumpQuote struct {
	Base string `json:"base"`
	Fees struct {
		LP       string `json:"lp"`
		Protocol string `json:"protocol"`
		Creator  string `json:"creator"`
	} `json:"fees"`
}

// PumpQuotes quotes buys with the official SDK (see pumpquote.mjs for the
// input).
func PumpQuotes(t testing.TB, cases any) []PumpQuote {
	t.Helper()
	node := requireNode(t)
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatalf("svmtest: pumpquote input: %v", err)
	}
	return runNode[[]PumpQuote](t, node, "pumpquote.mjs", in)
}
