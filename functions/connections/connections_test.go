package connections_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
	"github.com/coder/websocket"

	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/infra/relay"
)

// localRelay serves a relay that accepts creds on its management API and
// answers a "whoami" message with the connection id; it returns the
// management URL and an open connection with its id.
func localRelay(ctx context.Context, creds aws.Credentials) (mgmtURL string, ws *websocket.Conn, id string, stop func(), err error) {
	r := relay.New(relay.HandlerFunc(func(_ context.Context, ev events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		if ev.RequestContext.RouteKey == relay.RouteDefault && ev.Body == "whoami" {
			return events.APIGatewayProxyResponse{StatusCode: 200, Body: ev.RequestContext.ConnectionID}, nil
		}
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}), relay.WithCredentials(creds.AccessKeyID, creds.SecretAccessKey))
	workers := httptest.NewServer(r)
	mgmt := httptest.NewServer(r.Management())
	stop = func() {
		if ws != nil {
			_ = ws.CloseNow()
		}
		_ = r.Close()
		workers.Close()
		mgmt.Close()
	}
	ws, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(workers.URL, "http"), nil)
	if err != nil {
		stop()
		return "", nil, "", nil, err
	}
	// The route response comes once the connection is open to posts.
	if err = ws.Write(ctx, websocket.MessageText, []byte("whoami")); err == nil {
		var b []byte
		if _, b, err = ws.Read(ctx); err == nil {
			return mgmt.URL, ws, string(b), stop, nil
		}
	}
	stop()
	return "", nil, "", nil, err
}

// NewLocal signs with the credentials the local relay was given; a client
// with any other secret is refused.
func ExampleNewLocal() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	creds := aws.Credentials{AccessKeyID: "AKIAC0MPUTEEXAMPLE01", SecretAccessKey: "example-secret"}
	mgmtURL, ws, id, stop, err := localRelay(ctx, creds)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	if err := connections.NewLocal(mgmtURL, creds).Post(ctx, id, []byte("hello, worker")); err != nil {
		fmt.Println(err)
		return
	}
	_, msg, err := ws.Read(ctx)
	fmt.Println(string(msg), err)

	guessed := aws.Credentials{AccessKeyID: creds.AccessKeyID, SecretAccessKey: "guessed"}
	err = connections.NewLocal(mgmtURL, guessed).Post(ctx, id, []byte("forged"))
	var forbidden *types.ForbiddenException
	fmt.Println(errors.As(err, &forbidden), errors.Is(err, connections.ErrGone))
	// Output:
	// hello, worker <nil>
	// true false
}

func TestLocalGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	creds := aws.Credentials{AccessKeyID: "AKIAC0MPUTETEST00001", SecretAccessKey: "test-secret"}
	mgmtURL, _, id, stop, err := localRelay(ctx, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	c := connections.NewLocal(mgmtURL, creds)
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := c.Post(ctx, id, []byte("late")); !errors.Is(err, connections.ErrGone) {
		t.Fatalf("Post after Delete: %v, want ErrGone", err)
	}
	if err := c.Delete(ctx, id); err != nil {
		t.Fatalf("Delete of a gone connection: %v, want nil", err)
	}
}
