package keepercli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"

	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
)

// rpcNode answers every JSON-RPC call with the error errs names for its
// method.
func rpcNode(t *testing.T, errs map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		id, _ := json.Marshal(req.ID)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":%s}`, id, errs[req.Method])
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestRPCErrorsReadInOneLine: a node's error names the call and reads in
// one line, with the gist of its data, and still unwraps to the
// jsonrpc.RPCError (a preflight refusal is still known as one).
func TestRPCErrorsReadInOneLine(t *testing.T) {
	ctx := context.Background()
	url := rpcNode(t, map[string]string{
		"getBalance": `{"code":-32602,"message":"Invalid param: WrongSize"}`,
		"sendTransaction": `{"code":-32002,"message":"Transaction simulation failed: Error processing Instruction 0: custom program error: 0x1",` +
			`"data":{"accounts":null,"err":{"InstructionError":[0,{"Custom":1}]},"logs":["Program log: start","Program log: insufficient funds"],"unitsConsumed":1200}}`,
		"getSlot": `{"code":-32005,"message":"Node is behind","data":{"numSlotsBehind":120}}`,
		"simulateTransaction": `{"code":-32002,"message":"Transaction simulation failed",` +
			`"data":{"err":{"InstructionError":[0,{"Custom":1}]},"logs":["Program log: start","Program log: insufficient funds"]}}`,
	})
	client := newRPC(url)
	_, err := client.GetBalance(ctx, solana.SystemProgramID, rpc.CommitmentFinalized)
	var rerr *jsonrpc.RPCError
	if !errors.As(err, &rerr) || rerr.Code != -32602 {
		t.Fatalf("the RPC error does not unwrap: %v", err)
	}
	if got, want := errorText(fmt.Errorf("treasury SOL balance: %w", err)), "treasury SOL balance: getBalance: rpc error -32602: Invalid param: WrongSize"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	_, err = client.GetSlot(ctx, rpc.CommitmentConfirmed)
	if got, want := errorText(err), `getSlot: rpc error -32005: Node is behind (data {"numSlotsBehind":120})`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}

	payer := solana.NewWallet().PrivateKey
	memo, err := onchain.Memo("x")
	if err != nil {
		t.Fatal(err)
	}
	tx, err := solana.NewTransaction([]solana.Instruction{memo}, solana.Hash{1}, solana.TransactionPayer(payer.PublicKey()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Sign(func(solana.PublicKey) *solana.PrivateKey { return &payer }); err != nil {
		t.Fatal(err)
	}
	_, err = chain.New(client).Send(ctx, tx)
	if !errors.Is(err, chain.ErrPreflight) {
		t.Fatalf("a preflight refusal is no longer known as one: %v", err)
	}
	if got := errorText(err); strings.Contains(got, "\n") || !strings.Contains(got, "custom program error: 0x1") {
		t.Errorf("send error: %s", got)
	}
	_, err = client.SimulateTransaction(ctx, tx)
	want := `simulateTransaction: rpc error -32002: Transaction simulation failed (err {"InstructionError":[0,{"Custom":1}]}; ` +
		`2 log lines, the last "Program log: insufficient funds")`
	if got := errorText(err); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestErrorTextRewritesADump: a node error that did not pass through
// newRPC (its Error is a multi-line struct dump) is still printed in one
// line, its context kept.
func TestErrorTextRewritesADump(t *testing.T) {
	rerr := &jsonrpc.RPCError{Code: -32602, Message: "Invalid param: could not find account"}
	err := errors.Join(fmt.Errorf("keeper: treasury balance: %w", rerr), errors.New("another"))
	if !strings.Contains(err.Error(), "(*jsonrpc.RPCError)") {
		t.Fatalf("the dump this test is about is gone: %q", err)
	}
	want := "keeper: treasury balance: rpc error -32602: Invalid param: could not find account\nanother"
	if got := errorText(err); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
