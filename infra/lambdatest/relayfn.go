package lambdatest

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/infra/relay"
)

// RelayFunction makes the relay function running under an emulator the
// handler of a local relay (infra/relay): every $connect, $default and
// $disconnect event the relay produces is one invocation of the bootstrap,
// as API Gateway's Lambda proxy integration makes it in AWS.
func RelayFunction(e *Emulator) relay.Handler {
	return relay.HandlerFunc(func(ctx context.Context, req events.APIGatewayWebsocketProxyRequest) (events.APIGatewayProxyResponse, error) {
		r, err := e.Invoke(ctx, req)
		if err != nil {
			return events.APIGatewayProxyResponse{}, err
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(r.Body, &resp); err != nil {
			return resp, fmt.Errorf("lambdatest: relay response %q: %w", tail(string(r.Body), 200), err)
		}
		return resp, nil
	})
}
