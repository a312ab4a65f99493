package chain

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go/rpc"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// NewRPC is a Solana JSON-RPC client for endpoint whose errors never show
// the endpoint's path, query or user info: a paid endpoint's key travels
// in them, and the client library writes the whole URL into its errors,
// which end in logs and failure queues. A call is bounded by timeout.
func NewRPC(endpoint string, timeout time.Duration) *rpc.Client {
	return rpc.NewWithCustomRPCClient(NewJSONRPC(endpoint, timeout))
}

// NewJSONRPC is NewRPC's JSON-RPC client, for wrapping further.
func NewJSONRPC(endpoint string, timeout time.Duration) jsonrpc.RPCClient {
	inner := jsonrpc.NewClientWithOpts(endpoint, &jsonrpc.RPCClientOpts{HTTPClient: &http.Client{Timeout: timeout}})
	return redacting{RPCClient: inner, r: newRedactor(endpoint)}
}

// redactor replaces an endpoint's secret parts in text.
type redactor struct {
	secrets []string
}

func newRedactor(endpoint string) redactor {
	r := redactor{secrets: []string{endpoint}}
	u, err := url.Parse(endpoint)
	if err != nil {
		return r
	}
	for _, s := range []string{u.RawQuery, u.Query().Encode(), u.User.String(), u.EscapedPath(), u.Path} {
		if len(s) > 1 && s != "/" {
			r.secrets = append(r.secrets, s)
		}
	}
	for _, vs := range u.Query() {
		for _, v := range vs {
			if len(v) >= 4 {
				r.secrets = append(r.secrets, v, url.QueryEscape(v))
			}
		}
	}
	return r
}

func (r redactor) text(s string) string {
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, "…")
	}
	return s
}

// RedactedError is a JSON-RPC call's error with the endpoint's secret
// parts taken out. It unwraps to the node's own error (*jsonrpc.RPCError,
// whose code tells a preflight refusal) and to a context's, never to an
// error that carries the URL.
type RedactedError struct {
	msg  string
	errs []error
}

func (e *RedactedError) Error() string   { return e.msg }
func (e *RedactedError) Unwrap() []error { return e.errs }

func (r redactor) err(err error) error {
	if err == nil {
		return nil
	}
	out := &RedactedError{msg: r.text(err.Error())}
	var rerr *jsonrpc.RPCError
	if errors.As(err, &rerr) && rerr != nil {
		out.errs = append(out.errs, rerr)
	}
	for _, c := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, c) {
			out.errs = append(out.errs, c)
		}
	}
	return out
}

type redacting struct {
	jsonrpc.RPCClient
	r redactor
}

func (c redacting) CallForInto(ctx context.Context, out any, method string, params []any) error {
	return c.r.err(c.RPCClient.CallForInto(ctx, out, method, params))
}

func (c redacting) CallWithCallback(ctx context.Context, method string, params []any, callback func(*http.Request, *http.Response) error) error {
	return c.r.err(c.RPCClient.CallWithCallback(ctx, method, params, callback))
}

func (c redacting) CallBatch(ctx context.Context, requests jsonrpc.RPCRequests) (jsonrpc.RPCResponses, error) {
	res, err := c.RPCClient.CallBatch(ctx, requests)
	return res, c.r.err(err)
}

// Close closes the underlying client's idle connections.
func (c redacting) Close() error {
	if cl, ok := c.RPCClient.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}
