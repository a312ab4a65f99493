// Command relay is the relay function of the API Gateway WebSocket API:
// the $connect, $default and $disconnect routes all invoke it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
)

func main() {
	h, err := setup(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay: cold start:", err)
		os.Exit(1)
	}
	lambda.Start(h.Handle)
}

func setup(ctx context.Context) (*relayroutes.Handler, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := lambdaenv.LoadRelay(ctx, os.Getenv, secretsmanager.NewFromConfig(awsCfg))
	if err != nil {
		return nil, err
	}
	d, err := cfg.Deps(ctx, awsCfg)
	if err != nil {
		return nil, err
	}
	// Metrics go to stdout as EMF records, one a line, which CloudWatch
	// Logs turns into metrics.
	return &relayroutes.Handler{Store: d.Store, Post: d.Conns, Dispatch: dispatch.New(d.Store, d.Conns, d.Log),
		Catalog: d.Catalog, ListenerSecret: cfg.ListenerSecret, BatchWindow: cfg.BatchWindow, Log: d.Log,
		Metrics: metrics.FromEnv(os.Stdout)}, nil
}
