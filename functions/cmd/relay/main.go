// Command relay is the relay function of the API Gateway WebSocket API:
// the $connect, $default and $disconnect routes all invoke it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/relayroutes"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
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
	log := cfg.Logger()
	db, err := dynamo.NewClient(ctx, dynamo.Config{Endpoint: cfg.DynamoEndpoint})
	if err != nil {
		return nil, err
	}
	st := dynamo.New(db, cfg.Table)
	cat, err := catalog.New(catalog.Default())
	if err != nil {
		return nil, err
	}
	conns := connections.New(apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = &cfg.ConnectionsURL
		o.RetryMaxAttempts = 1
	}))
	return &relayroutes.Handler{Store: st, Post: conns, Dispatch: dispatch.New(st, conns, log), Catalog: cat,
		ListenerSecret: cfg.ListenerSecret, BatchWindow: cfg.BatchWindow, Log: log}, nil
}
