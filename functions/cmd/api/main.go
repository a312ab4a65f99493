// Command api is the OpenAI-compatible API as an AWS Lambda function behind
// a Function URL in RESPONSE_STREAM mode (API Gateway's HTTP APIs cannot
// stream). Each instance joins the relay's WebSocket API as a listener, so
// completions reach it from workers through memory only.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambdaurl"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/canary"
	"github.com/c0mpute/c0mpute/functions/dispatch"
	"github.com/c0mpute/c0mpute/functions/lambdaenv"
	"github.com/c0mpute/c0mpute/functions/listener"
	"github.com/c0mpute/c0mpute/functions/metrics"
	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/relaymsg"
	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/functions/x402"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
)

func main() {
	h, err := setup(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "api: cold start:", err)
		os.Exit(1)
	}
	lambdaurl.Start(h)
}

func setup(ctx context.Context) (http.Handler, error) {
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := lambdaenv.LoadAPI(ctx, os.Getenv, secretsmanager.NewFromConfig(awsCfg))
	if err != nil {
		return nil, err
	}
	d, err := cfg.Deps(ctx, awsCfg)
	if err != nil {
		return nil, err
	}
	log := d.Log
	lis, err := listener.Start(ctx, listener.Config{URL: cfg.RelayURL, Secret: cfg.ListenerSecret, Log: log})
	if err != nil {
		return nil, err
	}
	limits := api.DefaultLimits()
	if cfg.RatePerMinute > 0 {
		limits.RatePerMinute = cfg.RatePerMinute
	}
	if cfg.AccountRatePerMinute > 0 {
		limits.AccountRatePerMinute = cfg.AccountRatePerMinute
	}
	if cfg.WorkerSharePercent > 0 {
		limits.WorkerSharePercent = cfg.WorkerSharePercent
	}
	if cfg.MaxTokPerSec > 0 {
		limits.MaxTokPerSec = cfg.MaxTokPerSec
	}
	var signIn *siws.Issuer
	if cfg.SignInDomain != "" {
		chain := cfg.SignInChain
		if chain == "" {
			chain = "mainnet"
		}
		if signIn, err = siws.NewIssuer(cfg.ListenerSecret, cfg.SignInDomain, "https://"+cfg.SignInDomain, chain, api.SignInStatement); err != nil {
			return nil, err
		}
	}
	deposits, err := depositsFrom(cfg)
	if err != nil {
		return nil, err
	}
	topUps, err := topUpsFrom(cfg)
	if err != nil {
		return nil, err
	}
	staking, err := stakingFrom(cfg)
	if err != nil {
		return nil, err
	}
	// Metrics go to stdout as EMF records, one a line, which CloudWatch
	// Logs turns into metrics.
	emf := metrics.FromEnv(os.Stdout)
	a, err := api.New(api.Config{Store: d.Store, Dispatcher: dispatch.New(d.Store, d.Conns, log), Connections: d.Conns,
		Relay: lis, Catalog: d.Catalog, Tickets: relaymsg.NewTicketer(cfg.ListenerSecret), SignIn: signIn,
		CORSOrigins: cfg.CORSOrigins, Deposits: deposits, TopUps: topUps, Staking: staking, Limits: limits, Log: log,
		Metrics: emf})
	if err != nil {
		return nil, err
	}
	// Each instance checks workers with canaries while it runs (Lambda
	// thaws it for requests; a busy network keeps instances warm).
	runner, err := canary.New(canary.Config{Store: d.Store, Gateway: a, Catalog: d.Catalog, Secret: cfg.ListenerSecret,
		Every: time.Duration(cfg.CanaryEverySeconds) * time.Second, Log: log.With("component", "canary")})
	if err != nil {
		return nil, err
	}
	a.OnSuspect(runner.Suspect)
	go runner.Run(context.Background())
	if deposits != nil {
		// Each instance sweeps for unreported deposits while it runs; a
		// transfer is credited once however many sweep.
		go a.RunDepositSweeps(context.Background(), sweepEvery, log.With("component", "deposit-sweep"))
	}
	// Lambda freezes the instance between requests, heartbeats included:
	// make sure the listener connection survived before a job names it.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := lis.Check(r.Context()); err != nil {
			log.Error("relay listener unavailable", "err", err)
			// Answered here, before the API: counted as it counts its
			// own error answers.
			emf.Put([]metrics.Dim{{Name: "Code", Value: oaiwire.ErrNoWorker.Code}},
				metrics.Metric{Name: metrics.Errors, Unit: metrics.UnitCount, Value: 1})
			emf.Put(nil, metrics.Metric{Name: metrics.Requests, Unit: metrics.UnitCount, Value: 1},
				metrics.Metric{Name: metrics.ServerErrors, Unit: metrics.UnitCount, Value: 1})
			oaiwire.WriteError(w, oaiwire.ErrNoWorker)
			return
		}
		a.ServeHTTP(w, r)
	}), nil
}

// depositsFrom is the deposit routes' configuration, or nil while no
// treasury is set.
// stakingFrom is the staking routes' chain and programs; nil (off) without
// a staking program.
func stakingFrom(cfg lambdaenv.API) (*api.Staking, error) {
	if cfg.StakingProgram == "" {
		return nil, nil
	}
	var c onchain.Config
	for _, f := range []struct {
		env string
		v   string
		to  *solana.PublicKey
	}{{lambdaenv.EnvStakingProgram, cfg.StakingProgram, &c.StakingProgram}, {lambdaenv.EnvRewardsProgram, cfg.RewardsProgram, &c.RewardsProgram},
		{lambdaenv.EnvZeroMint, cfg.ZeroMint, &c.ZeroMint}, {lambdaenv.EnvUSDCMint, cfg.USDCMint, &c.USDCMint}} {
		pk, err := solana.PublicKeyFromBase58(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.env, err)
		}
		*f.to = pk
	}
	return &api.Staking{Config: c, Chain: chain.NewRPC(cfg.RPCURL, rpcTimeout)}, nil
}

func depositsFrom(cfg lambdaenv.API) (*api.Deposits, error) {
	if cfg.Treasury == "" {
		return nil, nil
	}
	mint, err := solana.PublicKeyFromBase58(cfg.USDCMint)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", lambdaenv.EnvUSDCMint, err)
	}
	treasury, err := solana.PublicKeyFromBase58(cfg.Treasury)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", lambdaenv.EnvTreasury, err)
	}
	client := chain.NewRPC(cfg.RPCURL, rpcTimeout)
	return &api.Deposits{Mint: mint, Treasury: treasury, Label: "c0mpute", Lister: client,
		Verifier: &deposit.Verifier{RPC: client, Config: onchain.Config{USDCMint: mint, Treasury: treasury}}}, nil
}

// topUpsFrom is the x402 top-up route's configuration, or nil while no
// network is set.
func topUpsFrom(cfg lambdaenv.API) (*api.TopUps, error) {
	if cfg.X402Network == "" {
		return nil, nil
	}
	network, err := x402.Network(cfg.X402Network)
	if err != nil {
		return nil, err
	}
	feePayer, err := onchain.ParseKey(cfg.X402FeePayer)
	if err != nil {
		return nil, fmt.Errorf("x402 fee payer: %w", err)
	}
	return &api.TopUps{Network: network, FeePayer: feePayer, Chain: chain.NewRPC(cfg.RPCURL, rpcTimeout)}, nil
}

// sweepEvery is how often an instance looks on-chain for unreported
// deposits.
const sweepEvery = time.Minute

// rpcTimeout bounds one call to the Solana node: a request waits on it.
const rpcTimeout = 30 * time.Second
