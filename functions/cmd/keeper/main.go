// Command keeper is the keeper as an AWS Lambda function, invoked by
// EventBridge Scheduler for the 00:00 UTC allowance, the 15:00 UTC rewards
// and buyback-burn, and payouts. Dry run unless configured otherwise; see
// keeperfn.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

func main() {
	cfg, err := keeperfn.Load(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper: cold start:", err)
		os.Exit(1)
	}
	h := &keeperfn.Handler{Config: cfg, Run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
		return keepercli.Main(ctx, args, stdout, stderr, keepercli.AWSSecrets)
	}}
	lambda.Start(h.Handle)
}
