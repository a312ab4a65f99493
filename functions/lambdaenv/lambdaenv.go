// Package lambdaenv loads the configuration of the gateway's Lambda
// functions once, at cold start, and fails fast with a message naming the
// variable at fault. Plain settings come from the environment; secrets come
// from AWS Secrets Manager (a variable holds the secret's ARN) or, for tests
// and containers, from a file (a variable holds its path) — never from a
// plain environment variable, which the Lambda console and API show to
// anyone who can read the function's configuration.
package lambdaenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	smtypes "github.com/aws/aws-sdk-go-v2/service/secretsmanager/types"
	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/catalog"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/cors"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
)

// Environment variables. Terraform sets exactly these (checked by the
// terraform tests).
const (
	EnvTable          = dynamo.EnvTable    // DynamoDB table
	EnvDynamoEndpoint = dynamo.EnvEndpoint // DynamoDB endpoint override (DynamoDB Local in tests)
	EnvConnectionsURL = "C0MPUTE_CONNECTIONS_URL"
	EnvRelayURL       = "C0MPUTE_RELAY_URL"
	EnvListenerSecret = "C0MPUTE_LISTENER_SECRET_ARN"
	EnvListenerFile   = "C0MPUTE_LISTENER_SECRET_FILE"
	EnvBatchWindowMS  = "C0MPUTE_BATCH_WINDOW_MS"
	EnvLogLevel       = "C0MPUTE_LOG_LEVEL"
	EnvRatePerMinute  = "C0MPUTE_RATE_PER_MINUTE"
	EnvAccountRate    = "C0MPUTE_ACCOUNT_RATE_PER_MINUTE"
	EnvWorkerSharePct = "C0MPUTE_WORKER_SHARE_PERCENT"
	EnvMaxTokPerSec   = "C0MPUTE_MAX_TOKENS_PER_SECOND"
	EnvCanaryEvery    = "C0MPUTE_CANARY_EVERY_SECONDS"
	EnvSignInDomain   = "C0MPUTE_SIGNIN_DOMAIN"
	EnvSignInChain    = "C0MPUTE_SIGNIN_CHAIN"
	EnvCORSOrigins    = "C0MPUTE_CORS_ORIGINS"
	EnvCatalog        = "C0MPUTE_CATALOG"
	// EnvRPCURLSecret is the Secrets Manager secret holding the Solana
	// JSON-RPC URL (paid endpoints carry their key in it), as deployed;
	// EnvRPCURL is the URL itself, for the dev network, tests and public
	// endpoints. Terraform sets only the secret.
	EnvRPCURLSecret = "C0MPUTE_RPC_URL_ARN"
	EnvRPCURL       = "C0MPUTE_RPC_URL"
	EnvUSDCMint     = "C0MPUTE_USDC_MINT"
	EnvTreasury     = "C0MPUTE_TREASURY"
	// EnvStakingProgram, EnvRewardsProgram and EnvZeroMint turn the
	// staking routes on (with EnvRPCURL and EnvUSDCMint).
	EnvStakingProgram   = "C0MPUTE_STAKING_PROGRAM"
	EnvRewardsProgram   = "C0MPUTE_REWARDS_PROGRAM"
	EnvZeroMint         = "C0MPUTE_ZERO_MINT"
	EnvX402Network      = "C0MPUTE_X402_NETWORK"
	EnvX402FeePayer     = "C0MPUTE_X402_FEE_PAYER_ARN"
	EnvX402FeePayerFile = "C0MPUTE_X402_FEE_PAYER_FILE"
	defaultBatchWindow  = 50 * time.Millisecond
)

// Gateway is what the API and relay functions share.
type Gateway struct {
	// Table is the DynamoDB table.
	Table string `validate:"required"`
	// DynamoEndpoint overrides DynamoDB's endpoint; empty in AWS.
	DynamoEndpoint string `validate:"omitempty,url"`
	// ConnectionsURL is the WebSocket API's management endpoint,
	// https://{api-id}.execute-api.{region}.amazonaws.com/{stage}.
	ConnectionsURL string `validate:"required,url"`
	// ListenerSecret authenticates API instances to the relay.
	ListenerSecret string `validate:"required,min=32"`
	// LogLevel for the JSON logs.
	LogLevel slog.Level
	// Catalog is the models on offer, their aliases and prices: the JSON
	// array itself, a file holding it, or empty for catalog.Default.
	Catalog string
}

// API is the API function's configuration.
type API struct {
	Gateway
	// RelayURL is the WebSocket API's wss:// URL, which the API joins as
	// a listener.
	RelayURL string `validate:"required,url,startswith=ws"`
	// RatePerMinute and WorkerSharePercent override the defaults of
	// api.DefaultLimits when set.
	RatePerMinute int64 `validate:"min=0"`
	// AccountRatePerMinute caps an account's keys together; 0 makes it
	// RatePerMinute.
	AccountRatePerMinute int64 `validate:"min=0"`
	WorkerSharePercent   int64 `validate:"min=0,max=100"`
	// MaxTokPerSec overrides api.DefaultLimits' speed check ceiling when
	// set: the fastest single stream a contributor's hardware decodes.
	MaxTokPerSec int64 `validate:"min=0,max=1000000"`
	// CanaryEverySeconds is each model's routine canary interval in each
	// API instance; 0 keeps the canary runner's default (60 s).
	CanaryEverySeconds int64 `validate:"min=0,max=86400"`
	// SignInDomain is the host users sign in to with Sign-In With Solana
	// (the API's public domain; the message's URI is https:// on it);
	// empty turns sign-in off. SignInChain is the chain it names.
	SignInDomain string `validate:"omitempty,hostname_port|fqdn"`
	SignInChain  string `validate:"omitempty,oneof=mainnet devnet testnet localnet solana:mainnet solana:devnet solana:testnet"`
	// CORSOrigins are the browser origins allowed to call the API
	// (comma-separated scheme://host[:port], or *); empty: CORS off.
	CORSOrigins []string
	// RPCURL is a Solana JSON-RPC endpoint, USDCMint the USDC mint and
	// Treasury the wallet deposits go to (base58); deposits are off while
	// Treasury is empty.
	RPCURL   string `validate:"required_with=Treasury,omitempty,url"`
	USDCMint string `validate:"required_with=Treasury,omitempty,min=32,max=44"`
	Treasury string `validate:"required_with=X402Network,omitempty,min=32,max=44"`
	// X402Network turns x402 top-ups on, on that cluster (mainnet,
	// devnet or testnet): they pay into Treasury, and X402FeePayer (a
	// keypair, from a secret) pays their fees.
	X402Network  string `validate:"omitempty,oneof=mainnet devnet testnet"`
	X402FeePayer string `validate:"required_with=X402Network"`
	// StakingProgram, RewardsProgram and ZeroMint (base58) turn the
	// staking routes on: all three, with RPCURL and USDCMint, or none.
	StakingProgram string `validate:"required_with=RewardsProgram ZeroMint,omitempty,min=32,max=44"`
	RewardsProgram string `validate:"required_with=StakingProgram ZeroMint,omitempty,min=32,max=44"`
	ZeroMint       string `validate:"required_with=StakingProgram RewardsProgram,omitempty,min=32,max=44"`
}

// Relay is the relay function's configuration.
type Relay struct {
	Gateway
	// BatchWindow is the workers' chunk batching window: each message is
	// a paid invocation of this function, so tens of milliseconds.
	BatchWindow time.Duration `validate:"min=0,max=1s"`
}

var validate = validator.New(validator.WithRequiredStructEnabled())

// SecretsClient is the part of Secrets Manager the loader calls.
type SecretsClient interface {
	GetSecretValue(context.Context, *secretsmanager.GetSecretValueInput, ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// Env reads variables; os.Getenv in production.
type Env func(string) string

func (e Env) gateway(ctx context.Context, sm SecretsClient) (Gateway, error) {
	g := Gateway{Table: e(EnvTable), DynamoEndpoint: e(EnvDynamoEndpoint), ConnectionsURL: e(EnvConnectionsURL),
		Catalog: e(EnvCatalog)}
	if lvl := e(EnvLogLevel); lvl != "" {
		if err := g.LogLevel.UnmarshalText([]byte(lvl)); err != nil {
			return g, fmt.Errorf("%s: %w", EnvLogLevel, err)
		}
	}
	secret, err := e.Secret(ctx, sm, EnvListenerSecret, EnvListenerFile)
	if err != nil {
		return g, err
	}
	g.ListenerSecret = secret
	return g, nil
}

// LoadAPI loads and validates the API function's configuration.
func LoadAPI(ctx context.Context, e Env, sm SecretsClient) (API, error) {
	g, err := e.gateway(ctx, sm)
	if err != nil {
		return API{}, err
	}
	c := API{Gateway: g, RelayURL: e(EnvRelayURL)}
	if c.RatePerMinute, err = e.integer(EnvRatePerMinute); err != nil {
		return API{}, err
	}
	if c.AccountRatePerMinute, err = e.integer(EnvAccountRate); err != nil {
		return API{}, err
	}
	if c.WorkerSharePercent, err = e.integer(EnvWorkerSharePct); err != nil {
		return API{}, err
	}
	if c.MaxTokPerSec, err = e.integer(EnvMaxTokPerSec); err != nil {
		return API{}, err
	}
	if c.CanaryEverySeconds, err = e.integer(EnvCanaryEvery); err != nil {
		return API{}, err
	}
	c.SignInDomain, c.SignInChain = e(EnvSignInDomain), e(EnvSignInChain)
	if c.CORSOrigins, err = cors.ParseOrigins(e(EnvCORSOrigins)); err != nil {
		return API{}, fmt.Errorf("%s: %w", EnvCORSOrigins, err)
	}
	if c.RPCURL, err = e.RPCURL(ctx, sm); err != nil {
		return API{}, err
	}
	c.USDCMint, c.Treasury = e(EnvUSDCMint), e(EnvTreasury)
	c.StakingProgram, c.RewardsProgram, c.ZeroMint = e(EnvStakingProgram), e(EnvRewardsProgram), e(EnvZeroMint)
	if c.StakingProgram != "" && (c.RPCURL == "" || c.USDCMint == "") {
		return API{}, fmt.Errorf("lambdaenv: %s needs %s and %s", EnvStakingProgram, EnvRPCURL, EnvUSDCMint)
	}
	if c.X402Network = e(EnvX402Network); c.X402Network != "" {
		if c.X402FeePayer, err = e.Secret(ctx, sm, EnvX402FeePayer, EnvX402FeePayerFile); err != nil {
			return API{}, err
		}
	}
	return c, check(c)
}

// LoadRelay loads and validates the relay function's configuration.
func LoadRelay(ctx context.Context, e Env, sm SecretsClient) (Relay, error) {
	g, err := e.gateway(ctx, sm)
	if err != nil {
		return Relay{}, err
	}
	c := Relay{Gateway: g, BatchWindow: defaultBatchWindow}
	ms, err := e.integer(EnvBatchWindowMS)
	if err != nil {
		return Relay{}, err
	}
	if e(EnvBatchWindowMS) != "" {
		c.BatchWindow = time.Duration(ms) * time.Millisecond
	}
	return c, check(c)
}

func (e Env) integer(name string) (int64, error) {
	v := e(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not an integer", name, v)
	}
	return n, nil
}

// check validates c and names the variables at fault.
func check(c any) error {
	err := validate.Struct(c)
	var ve validator.ValidationErrors
	if !errors.As(err, &ve) {
		return err
	}
	var msgs []string
	for _, fe := range ve {
		msgs = append(msgs, fmt.Sprintf("%s fails %q", variable[fe.Field()], fe.Tag()))
	}
	return fmt.Errorf("lambdaenv: invalid configuration: %s", strings.Join(msgs, "; "))
}

// variable maps a field to the variable it comes from, for messages.
var variable = map[string]string{
	"Table": EnvTable, "DynamoEndpoint": EnvDynamoEndpoint, "ConnectionsURL": EnvConnectionsURL,
	"ListenerSecret": EnvListenerSecret + " or " + EnvListenerFile, "RelayURL": EnvRelayURL,
	"RatePerMinute": EnvRatePerMinute, "AccountRatePerMinute": EnvAccountRate, "WorkerSharePercent": EnvWorkerSharePct, "BatchWindow": EnvBatchWindowMS,
	"MaxTokPerSec": EnvMaxTokPerSec, "CanaryEverySeconds": EnvCanaryEvery,
	"SignInDomain": EnvSignInDomain, "SignInChain": EnvSignInChain,
	"RPCURL": EnvRPCURLSecret + " or " + EnvRPCURL, "USDCMint": EnvUSDCMint, "Treasury": EnvTreasury,
	"X402Network": EnvX402Network, "X402FeePayer": EnvX402FeePayer + " or " + EnvX402FeePayerFile,
	"StakingProgram": EnvStakingProgram, "RewardsProgram": EnvRewardsProgram, "ZeroMint": EnvZeroMint,
}

// Secret reads a secret from Secrets Manager (arnVar holds its ARN) or from
// a file (fileVar holds its path); exactly one must be set. Surrounding
// whitespace is trimmed.
func (e Env) Secret(ctx context.Context, sm SecretsClient, arnVar, fileVar string) (string, error) {
	arn, file := e(arnVar), e(fileVar)
	switch {
	case arn != "" && file != "":
		return "", fmt.Errorf("lambdaenv: set %s or %s, not both", arnVar, fileVar)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("lambdaenv: %s: %w", fileVar, err)
		}
		return strings.TrimSpace(string(b)), nil
	case arn != "":
		if sm == nil {
			return "", fmt.Errorf("lambdaenv: %s set but no Secrets Manager client", arnVar)
		}
		out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
		if err != nil {
			return "", fmt.Errorf("lambdaenv: %s: %w", arnVar, err)
		}
		return strings.TrimSpace(aws.ToString(out.SecretString)), nil
	}
	return "", fmt.Errorf("lambdaenv: set %s (a Secrets Manager ARN) or %s (a file)", arnVar, fileVar)
}

// RPCURL reads the Solana JSON-RPC URL: from the secret EnvRPCURLSecret
// names (as deployed: the URL may carry a key), else from EnvRPCURL; ""
// when neither is set. A secret without a value is an error that says how
// to put one.
func (e Env) RPCURL(ctx context.Context, sm SecretsClient) (string, error) {
	arn, plain := e(EnvRPCURLSecret), e(EnvRPCURL)
	switch {
	case arn != "" && plain != "":
		return "", fmt.Errorf("lambdaenv: set %s or %s, not both", EnvRPCURLSecret, EnvRPCURL)
	case arn == "":
		return plain, nil
	case sm == nil:
		return "", fmt.Errorf("lambdaenv: %s set but no Secrets Manager client", EnvRPCURLSecret)
	}
	out, err := sm.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(arn)})
	var missing *smtypes.ResourceNotFoundException
	if errors.As(err, &missing) || err == nil && strings.TrimSpace(aws.ToString(out.SecretString)) == "" {
		return "", fmt.Errorf("lambdaenv: %s: the secret has no value yet; put the Solana RPC URL in it: "+
			"aws secretsmanager put-secret-value --secret-id %s --secret-string 'https://…'", EnvRPCURLSecret, arn)
	}
	if err != nil {
		return "", fmt.Errorf("lambdaenv: %s: %w", EnvRPCURLSecret, err)
	}
	return strings.TrimSpace(aws.ToString(out.SecretString)), nil
}

// Logger is the functions' JSON logger at the configured level.
func (g Gateway) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: g.LogLevel}))
}

// Deps are what both gateway functions are built from.
type Deps struct {
	Store   *dynamo.Store
	Conns   *connections.Client
	Catalog *catalog.Catalog
	Log     *slog.Logger
}

// Deps connects to the table and the WebSocket API's management endpoint.
func (g Gateway) Deps(ctx context.Context, awsCfg aws.Config) (Deps, error) {
	db, err := dynamo.NewClient(ctx, dynamo.Config{Endpoint: g.DynamoEndpoint})
	if err != nil {
		return Deps{}, err
	}
	cat, err := catalog.FromSource(g.Catalog)
	if err != nil {
		return Deps{}, fmt.Errorf("%s: %w", EnvCatalog, err)
	}
	conns := connections.New(apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
		o.BaseEndpoint = aws.String(g.ConnectionsURL)
		// Our protocol retries (requeue, refund); the SDK's retries would
		// only delay the Gone that drives it.
		o.RetryMaxAttempts = 1
	}))
	return Deps{Store: dynamo.New(db, g.Table), Conns: conns, Catalog: cat, Log: g.Logger()}, nil
}
