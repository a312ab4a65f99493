package keepercli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"

	"github.com/c0mpute/c0mpute/onchain/chain"
)

// rpcTimeout bounds one JSON-RPC call: a keeper run makes a few dozen, and
// a node that stops answering must fail the run, not hang it.
const rpcTimeout = 60 * time.Second

// newRPC is a Solana JSON-RPC client whose failed calls name their method
// and read in one line (callError), and never show the endpoint's key
// (chain.NewJSONRPC).
func newRPC(endpoint string) *rpc.Client {
	return rpc.NewWithCustomRPCClient(namedCalls{chain.NewJSONRPC(endpoint, rpcTimeout)})
}

// namedCalls wraps every error of a JSON-RPC client in a callError.
type namedCalls struct{ jsonrpc.RPCClient }

func (c namedCalls) CallForInto(ctx context.Context, out any, method string, params []any) error {
	return callErr(method, c.RPCClient.CallForInto(ctx, out, method, params))
}

func (c namedCalls) CallWithCallback(ctx context.Context, method string, params []any, callback func(*http.Request, *http.Response) error) error {
	return callErr(method, c.RPCClient.CallWithCallback(ctx, method, params, callback))
}

func (c namedCalls) CallBatch(ctx context.Context, requests jsonrpc.RPCRequests) (jsonrpc.RPCResponses, error) {
	res, err := c.RPCClient.CallBatch(ctx, requests)
	return res, callErr("batch", err)
}

var _ io.Closer = namedCalls{}

func callErr(method string, err error) error {
	if err == nil {
		return nil
	}
	return &callError{Method: method, Err: err}
}

// callError is a failed JSON-RPC call. It unwraps to the client's error,
// so that errors.As still finds a *jsonrpc.RPCError (chain.Send tells a
// preflight refusal by its code).
type callError struct {
	Method string
	Err    error
}

func (e *callError) Error() string { return e.Method + ": " + describeRPC(e.Err) }
func (e *callError) Unwrap() error { return e.Err }

// describeRPC is err in one line: a node's error as "rpc error CODE:
// MESSAGE (data)", where jsonrpc.RPCError's own Error is a multi-line
// struct dump.
func describeRPC(err error) string {
	var rerr *jsonrpc.RPCError
	if errors.As(err, &rerr) && rerr != nil {
		return rpcErrorLine(rerr)
	}
	var herr *jsonrpc.HTTPError
	if errors.As(err, &herr) && herr != nil {
		return fmt.Sprintf("HTTP %d: %v", herr.Code, herr)
	}
	return err.Error()
}

func rpcErrorLine(e *jsonrpc.RPCError) string {
	return fmt.Sprintf("rpc error %d: %s%s", e.Code, e.Message, dataSummary(e.Data))
}

// maxData bounds what an error shows of a node's error data.
const maxData = 200

// dataSummary is the gist of a node's error data: a failed simulation's
// error and last log line, or the data itself, shortened.
func dataSummary(d any) string {
	if d == nil {
		return ""
	}
	if m, ok := d.(map[string]any); ok {
		var parts []string
		if e := m["err"]; e != nil {
			parts = append(parts, "err "+compact(e))
		}
		if logs, ok := m["logs"].([]any); ok && len(logs) > 0 {
			parts = append(parts, fmt.Sprintf("%d log lines, the last %s", len(logs), compact(logs[len(logs)-1])))
		}
		if len(parts) > 0 {
			return " (" + strings.Join(parts, "; ") + ")"
		}
	}
	return " (data " + compact(d) + ")"
}

func compact(v any) string {
	b, err := json.Marshal(v)
	s := string(b)
	if err != nil {
		s = fmt.Sprint(v)
	}
	if r := []rune(s); len(r) > maxData {
		s = string(r[:maxData]) + "…"
	}
	return s
}

// errorText is err as the command prints it: any node error still in its
// multi-line dump form (one that did not pass through newRPC) read in one
// line.
func errorText(err error) string {
	s := err.Error()
	for _, rerr := range rpcErrors(err) {
		s = strings.ReplaceAll(s, rerr.Error(), rpcErrorLine(rerr))
	}
	return s
}

// rpcErrors are the *jsonrpc.RPCError values in err's tree.
func rpcErrors(err error) []*jsonrpc.RPCError {
	var out []*jsonrpc.RPCError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if r, ok := err.(*jsonrpc.RPCError); ok && r != nil {
			out = append(out, r)
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	walk(err)
	return out
}
