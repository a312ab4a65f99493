package lambdatest

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/c0mpute/c0mpute/infra/relay"
)

// localRelay is a test's local API Gateway stand-in: the worker-facing
// WebSocket endpoint, and the @connections management API on a loopback
// listener of its own that takes only calls SigV4-signed with creds, as
// API Gateway takes only the function role's signed calls.
type localRelay struct {
	wsURL   string // ws://127.0.0.1:port, for workers and listeners
	mgmtURL string // http://127.0.0.1:port, C0MPUTE_CONNECTIONS_URL
	// creds are the only credentials the management API accepts; the
	// functions get them as their role's (AWS_ACCESS_KEY_ID, …).
	creds aws.Credentials

	wsLn, mgmtLn net.Listener
}

// localKeyID is the access key id of the functions' credentials. They use
// them for the table too, and DynamoDB Local (without -sharedDb) keeps one
// database per access key id, so it is the id the tests' own DynamoDB
// client signs with (functions/store/dynamo's default for DynamoDB Local).
// The secret, which DynamoDB Local ignores and the relay verifies, is
// random per relay.
const localKeyID = "c0mputelocal"

// listenRelay opens the relay's two listeners and makes its credentials,
// so that the functions can be configured before the relay serves.
func listenRelay(t testing.TB) *localRelay {
	t.Helper()
	wsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mgmtLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		wsLn.Close()
		t.Fatal(err)
	}
	return &localRelay{wsURL: "ws://" + wsLn.Addr().String(), mgmtURL: "http://" + mgmtLn.Addr().String(),
		creds: aws.Credentials{AccessKeyID: localKeyID, SecretAccessKey: randomHex(20)},
		wsLn:  wsLn, mgmtLn: mgmtLn}
}

// serve runs a relay in front of h on the listeners until the test ends.
func (lr *localRelay) serve(t testing.TB, h relay.Handler, opts ...relay.Option) *relay.Relay {
	t.Helper()
	rel := relay.New(h, append(opts, relay.WithCredentials(lr.creds.AccessKeyID, lr.creds.SecretAccessKey))...)
	srv := &http.Server{Handler: rel, ReadHeaderTimeout: 10 * time.Second}
	mgmt := &http.Server{Handler: rel.Management(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lr.wsLn) }()
	go func() { _ = mgmt.Serve(lr.mgmtLn) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rel.Close()
		_ = srv.Shutdown(ctx)
		_ = mgmt.Shutdown(ctx)
	})
	return rel
}
