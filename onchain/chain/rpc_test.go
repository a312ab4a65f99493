package chain

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc/jsonrpc"
)

// TestNewRPCRedactsTheEndpoint: whatever way a call fails — the node
// refuses it, answers 429, or cannot be reached — the error names no part
// of the endpoint that can carry a key, and a node's own error is still
// found by errors.As (a preflight refusal is told by its code).
func TestNewRPCRedactsTheEndpoint(t *testing.T) {
	const key = "SECRETKEY-0123456789"
	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/busy":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"Transaction simulation failed"}}`)
		}
	}))
	defer node.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, c := range []struct {
		name, endpoint string
		node           bool
	}{
		{"node error", node.URL + "/v1/?api-key=" + key, true},
		{"429", node.URL + "/busy?api-key=" + key, false},
		{"unreachable", downURL + "/" + key, false},
		{"user info", strings.Replace(downURL, "http://", "http://user:"+key+"@", 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := NewRPC(c.endpoint, 5*time.Second).GetBalance(ctx, solana.SystemProgramID, "")
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), key) || strings.Contains(fmt.Sprintf("%+v", err), key) {
				t.Fatalf("the error shows the key: %v", err)
			}
			var rerr *jsonrpc.RPCError
			if errors.As(err, &rerr) != c.node || c.node && rerr.Code != -32002 {
				t.Fatalf("errors.As RPCError = %v (%v), want %v", rerr != nil, err, c.node)
			}
		})
	}
}
