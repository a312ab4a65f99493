package lambdatest

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// BenchmarkColdStart starts each function's bootstrap under a fresh
// emulator and invokes it once, reporting the init phase the emulator
// measured (init-ms: from exec to the first request for work, what Lambda
// bills as Init Duration) and the first invocation's wall time including
// init (first-ms). The API's init includes joining the relay as a listener
// (a WebSocket handshake and a $connect through the relay function).
//
//	C0MPUTE_DYNAMODB_ENDPOINT=… go test -run '^$' -bench ColdStart -benchtime 5x ./infra/lambdatest/
func BenchmarkColdStart(b *testing.B) {
	rie := RequireRIE(b)
	g := newGateway(b)
	var models events.LambdaFunctionURLRequest
	loadEvent(b, "function-url-models.json", &models)
	var disconnect events.APIGatewayWebsocketProxyRequest
	loadEvent(b, "websocket-disconnect.json", &disconnect)
	fns := []struct {
		name  string
		start func(b *testing.B) *Emulator
		event any
	}{
		{"api", func(b *testing.B) *Emulator { return g.startAPI(b) }, models},
		{"relay", func(b *testing.B) *Emulator { return Start(b, rie, Bootstrap(b, "relay"), g.env) }, disconnect},
		// Init only: a bad event needs no chain.
		{"keeper", func(b *testing.B) *Emulator {
			return Start(b, rie, Bootstrap(b, "keeper"), map[string]string{"C0MPUTE_KEEPER_CONFIG": `{}`,
				"C0MPUTE_KEEPER_KEY_FILE": "/nonexistent", "AWS_REGION": "us-east-1"})
		}, []byte(`{"job":"none"}`)},
	}
	for _, fn := range fns {
		b.Run(fn.name, func(b *testing.B) {
			Bootstrap(b, fn.name) // build outside the timing
			var initTotal, firstTotal time.Duration
			for range b.N {
				e := fn.start(b)
				t0 := time.Now()
				_, err := e.Invoke(context.Background(), fn.event)
				first := time.Since(t0)
				if _, ok := err.(*FunctionError); err != nil && !ok {
					b.Fatal(err)
				}
				d, err := e.InitDuration()
				if err != nil {
					b.Fatal(err)
				}
				initTotal += d
				firstTotal += first
			}
			b.ReportMetric(float64(initTotal.Microseconds())/1000/float64(b.N), "init-ms")
			b.ReportMetric(float64(firstTotal.Microseconds())/1000/float64(b.N), "first-ms")
		})
	}
}
