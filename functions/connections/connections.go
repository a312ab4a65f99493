// Package connections talks to the relay's @connections management API —
// API Gateway's in AWS, the local relay's on one machine — through the
// official apigatewaymanagementapi client, so both runtimes share one path.
package connections

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi/types"
)

// ErrGone means the connection no longer exists (GoneException).
var ErrGone = errors.New("connections: connection is gone")

// API is the part of the management client this package calls.
type API interface {
	PostToConnection(ctx context.Context, in *apigatewaymanagementapi.PostToConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.PostToConnectionOutput, error)
	DeleteConnection(ctx context.Context, in *apigatewaymanagementapi.DeleteConnectionInput, opts ...func(*apigatewaymanagementapi.Options)) (*apigatewaymanagementapi.DeleteConnectionOutput, error)
}

// Client posts to and closes relay connections.
type Client struct{ api API }

// New wraps a management API client.
func New(api API) *Client { return &Client{api: api} }

// NewLocal builds a client for the local relay's management API at baseURL
// (http://host:port, the listener of relay.Management). Requests are
// SigV4-signed with creds, as the SDK signs them for API Gateway in AWS;
// the local relay verifies the signature against the credentials it was
// configured with and refuses anything else with ForbiddenException.
func NewLocal(baseURL string, creds aws.Credentials) *Client {
	return New(apigatewaymanagementapi.New(apigatewaymanagementapi.Options{
		BaseEndpoint: aws.String(baseURL),
		// Any region: the relay takes it from the signature's scope.
		Region:      "local",
		Credentials: credentials.StaticCredentialsProvider{Value: creds},
		// A post is retried by our own protocol logic (requeue, refund);
		// the SDK's retries would only delay the Gone that drives it.
		RetryMaxAttempts: 1,
	}))
}

// Post sends data to a connection; ErrGone if it is dead.
func (c *Client) Post(ctx context.Context, conn string, data []byte) error {
	_, err := c.api.PostToConnection(ctx, &apigatewaymanagementapi.PostToConnectionInput{ConnectionId: aws.String(conn), Data: data})
	return wrap("post to", conn, err)
}

// Delete closes a connection; a connection already gone is not an error.
func (c *Client) Delete(ctx context.Context, conn string) error {
	_, err := c.api.DeleteConnection(ctx, &apigatewaymanagementapi.DeleteConnectionInput{ConnectionId: aws.String(conn)})
	if err = wrap("delete", conn, err); errors.Is(err, ErrGone) {
		return nil
	}
	return err
}

func wrap(op, conn string, err error) error {
	if err == nil {
		return nil
	}
	var gone *types.GoneException
	if errors.As(err, &gone) {
		return fmt.Errorf("connections: %s %s: %w", op, conn, ErrGone)
	}
	return fmt.Errorf("connections: %s %s: %w", op, conn, err)
}
