package lambdatest

import (
	"context"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/workerd/backend"
)

// fixedBackend answers every request with the same reply at once.
type fixedBackend struct{}

const fixedReply = "Hello from a signed relay"

func (fixedBackend) Name() string                             { return "fixed" }
func (fixedBackend) Models(context.Context) ([]string, error) { return []string{"fixed"}, nil }
func (fixedBackend) Chat(_ context.Context, _ string, _ *oaiwire.ChatRequest, emit func(oaiwire.Delta) error) (backend.Result, error) {
	if err := emit(oaiwire.Delta{Content: fixedReply}); err != nil {
		return backend.Result{}, err
	}
	return backend.Result{FinishReason: "stop", Usage: oaiwire.Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8}}, nil
}

// TestSignedManagementCallsUnderRIE runs a streaming chat through the API
// and relay bootstraps under the emulator, with a worker on a fixed reply
// rather than Ollama, so it runs wherever the emulator and DynamoDB Local
// do. Every @connections call the functions make on the way goes to the
// local relay's management API signed by the SDK with the credentials
// Lambda's environment gives them, and the relay verifies each signature:
// the reply can only arrive if they are signed right.
func TestSignedManagementCallsUnderRIE(t *testing.T) {
	g := newGateway(t)
	acct := g.account(t, 1000)
	g.startWorker(t, acct.workerToken, fixedBackend{}, map[string]string{"c0mpute-pro": "fixed"})
	g.waitIdleWorkers(t, "c0mpute-pro", 1)
	api := g.startAPI(t)

	var ev events.LambdaFunctionURLRequest
	loadEvent(t, "function-url-chat.json", &ev)
	ev.Headers["authorization"] = "Bearer " + acct.apiKey
	status, header, body := invokeURL(t, api, ev)
	if status != http.StatusOK || header["Content-Type"] != "text/event-stream" {
		t.Fatalf("chat: %d %v %s\napi:\n%s\nrelay function:\n%s", status, header, body, tail(api.Logs(), 3000), tail(g.relay.Logs(), 3000))
	}
	if text, finish, done := readSSE(t, body); text != fixedReply || finish != "stop" || !done {
		t.Fatalf("stream: text %q, finish %q, [DONE] %v\napi:\n%s\nrelay function:\n%s", text, finish, done,
			tail(api.Logs(), 3000), tail(g.relay.Logs(), 3000))
	}
}
