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
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

func main() {
	ctx := context.Background()
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper: cold start:", err)
		os.Exit(1)
	}
	cfg, err := keeperfn.Load(ctx, os.Getenv, secretsmanager.NewFromConfig(awsCfg))
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeper: cold start:", err)
		os.Exit(1)
	}
	h := &keeperfn.Handler{Config: cfg, Metrics: metrics.FromEnv(os.Stdout),
		Run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return keepercli.Main(ctx, args, stdout, stderr, keepercli.AWSSecrets)
		}}
	lambda.Start(h.Handle)
}
