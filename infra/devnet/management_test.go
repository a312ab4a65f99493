package devnet_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"

	"github.com/c0mpute/c0mpute/functions/connections"
)

// TestManagementOnlyForTheStack checks who can reach the relay's
// connections: the management API listens on loopback and refuses unsigned
// calls and other credentials, the worker port refuses management calls
// outright, and the stack's own client (which the dispatcher, API and relay
// function post with) is accepted. The target is the API's listener
// connection, whose loss would cut every stream.
func TestManagementOnlyForTheStack(t *testing.T) {
	stack := startShort(t)
	ctx := context.Background()
	conn, err := stack.Listener().Conn()
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(stack.ManagementURL)
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("ManagementURL %q (%v): want a loopback address", stack.ManagementURL, err)
	}
	relayHTTP := "http" + strings.TrimPrefix(stack.RelayURL, "ws")

	for _, tt := range []struct{ name, method, url string }{
		{"unsigned delete", http.MethodDelete, stack.ManagementURL + "/@connections/" + conn},
		{"unsigned post", http.MethodPost, stack.ManagementURL + "/@connections/" + conn},
		{"unsigned get", http.MethodGet, stack.ManagementURL + "/@connections/" + conn},
		{"delete on the worker port", http.MethodDelete, relayHTTP + "/@connections/" + conn},
		{"post on the worker port", http.MethodPost, relayHTTP + "/local/@connections/" + conn},
	} {
		req, err := http.NewRequestWithContext(ctx, tt.method, tt.url, strings.NewReader(`{"v":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Amzn-ErrorType") != "ForbiddenException" {
			t.Errorf("%s: %d %q, want 403 ForbiddenException", tt.name, resp.StatusCode, resp.Header.Get("X-Amzn-ErrorType"))
		}
	}
	other := connections.NewLocal(stack.ManagementURL, aws.Credentials{AccessKeyID: "AKIAC0MPUTEOTHER0001", SecretAccessKey: "guess"})
	var forbidden *types.ForbiddenException
	if err := other.Delete(ctx, conn); !errors.As(err, &forbidden) {
		t.Errorf("delete with other credentials: %v, want ForbiddenException", err)
	}
	if now, err := stack.Listener().Conn(); err != nil || now != conn {
		t.Fatalf("listener connection %s, %v after refused calls; want %s", now, err, conn)
	}

	// The stack's own client is the one that can.
	if err := stack.Conns.Delete(ctx, conn); err != nil {
		t.Fatalf("the stack's own delete: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := stack.Listener().Check(ctx); err != nil {
			t.Fatal(err)
		}
		if now, err := stack.Listener().Conn(); err == nil && now != conn {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stack's own delete did not end the listener connection")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
