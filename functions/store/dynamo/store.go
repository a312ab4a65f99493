// Package dynamo is store.Store on Amazon DynamoDB, for the gateway in AWS.
// It passes the same conformance suite as the embedded store, run against
// AWS's DynamoDB Local (functions/store/conformance_test.go).
//
// The table is defined once in infra/schema; README.md next to this file
// lists every access pattern with its key and index. In short:
//
//   - Every change that moves credits or changes a job's state is one
//     TransactWriteItems call whose conditions encode the state machine, so a
//     lost race is a cancelled transaction (store.ErrConflict and friends),
//     never a half-applied change. The SDK fills ClientRequestToken, so its
//     own retries of a transaction whose reply was lost apply it once.
//   - Transactions cancelled by a conflicting transaction on the same item
//     are retried with capped exponential backoff and full jitter; so are
//     throttling errors (the SDK's retryer).
//   - The index (queued jobs, live workers) is read as a hint: a stale entry
//     loses its conditional write and the caller moves on; the base table is
//     the truth.
//   - The hot path is two round trips per chat request when a worker is
//     idle (AdmitAssign, Complete; Admit and Assign apart when none is):
//     each of those writes is built from what the store already
//     knows (the job it admitted, the workers it listed), and conditions
//     make stale knowledge safe: a failed condition returns the item as it
//     is (ALL_OLD), the store learns it and tries once more.
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// Client is the part of the DynamoDB API the store calls.
type Client interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Tuning constants.
const (
	// queueShards spreads one model's queue over this many index
	// partitions. Every admitted job writes its queue entry once and
	// removes it once; an index partition takes about 1,000 writes/s, so 4
	// shards carry about 2,000 jobs/s per model before throttling.
	queueShards = 4
	// workerShards spreads live workers over index partitions; each job
	// changes its worker's entry twice (busy, idle), so 8 shards carry
	// about 4,000 jobs/s.
	workerShards = 8
	// statShards spreads the completion counters: every completion adds to
	// one counter item, chosen by job id, and Stats sums them all (two
	// items a shard, in one BatchGetItem of at most 100 keys). One item
	// would be a write hot spot and a source of transaction conflicts.
	statShards = 32
	// earnShards spreads a worker account's earnings: one operator's many
	// GPUs complete jobs at once, and each completion adds to one shard,
	// chosen by job id; GetAccount sums them.
	earnShards = 8
	// identityShards spreads the index entries of identities'
	// reputations, which every completion changes (by pubkey, so one
	// operator's GPUs spread too); Reputations("") reads them all.
	identityShards = 8

	// conflictRetries bounds the retries of a transaction cancelled by a
	// conflicting transaction or throttling. Contention is on one paying
	// account or one rate window (a single key's burst); with full jitter
	// capped at conflictMaxWait the waits average 100 ms, so this is about
	// 20 s of trying before giving up.
	conflictRetries  = 200
	conflictBaseWait = 2 * time.Millisecond
	conflictMaxWait  = 200 * time.Millisecond

	// connectionTTL bounds how long a worker or listener record outlives
	// a connection whose $disconnect never arrived: API Gateway closes
	// every connection after 2 hours.
	connectionTTL = 3 * time.Hour
	// rateWindowTTL keeps a rate-limit counter a while after its one-minute
	// window, for callers whose clock lags.
	rateWindowTTL = 5 * time.Minute
	// tokenMinuteTTL keeps per-minute token counts long enough for Stats
	// to read the last full minute.
	tokenMinuteTTL = 10 * time.Minute

	// maxBatchGet is the most keys one BatchGetItem may ask for.
	maxBatchGet = 100

	// maxModels bounds a worker's registered models: each is an element
	// of its record, and records are at most 400 KB.
	maxModels = 256
)

// Store implements store.Store on one DynamoDB table.
type Store struct {
	db    Client
	table string
	now   func() time.Time
	hints hints
	// maxConns is the most live workers one worker token may hold.
	maxConns int64
}

var _ store.Store = (*Store)(nil)

// Option configures New.
type Option func(*Store)

// WithClock sets the clock UseNonce judges expiry by, and connection
// records their expiry (tests).
func WithClock(now func() time.Time) Option { return func(s *Store) { s.now = now } }

// WithMaxConnsPerToken sets the most live workers one worker token may hold
// [store.MaxConnsPerToken], for tests that need another cap. Values below 1
// are taken as 1.
func WithMaxConnsPerToken(n int) Option {
	return func(s *Store) { s.maxConns = int64(max(n, 1)) }
}

// New returns a store on table, which must exist (schema.Ensure creates it).
func New(db Client, table string, opts ...Option) *Store {
	s := &Store{db: db, table: table, now: time.Now, maxConns: store.MaxConnsPerToken}
	s.hints.init()
	for _, o := range opts {
		o(s)
	}
	return s
}

// Config says where the table is.
type Config struct {
	// Table is the table name [schema.DefaultTable].
	Table string
	// Endpoint overrides the DynamoDB endpoint (DynamoDB Local); empty
	// uses AWS's.
	Endpoint string
	// Region is the AWS region; empty takes it from the AWS configuration
	// chain, or "us-east-1" with an Endpoint.
	Region string
}

// Environment variables read by ConfigFromEnv.
const (
	EnvEndpoint = "C0MPUTE_DYNAMODB_ENDPOINT"
	EnvTable    = "C0MPUTE_DYNAMODB_TABLE"
)

// ConfigFromEnv reads C0MPUTE_DYNAMODB_ENDPOINT and C0MPUTE_DYNAMODB_TABLE.
func ConfigFromEnv() Config {
	return Config{Endpoint: os.Getenv(EnvEndpoint), Table: os.Getenv(EnvTable)}
}

// NewClient builds a DynamoDB client from the AWS configuration chain
// (environment, shared files, the Lambda role). With an Endpoint and no
// credentials in the environment it uses fixed local ones: DynamoDB Local
// accepts any made of letters and digits.
func NewClient(ctx context.Context, c Config) (*dynamodb.Client, error) {
	opts := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRetryer(func() aws.Retryer {
			// Throttling and 5xx: exponential backoff with full jitter
			// (the standard retryer), a few more attempts than the
			// default because a throttled gateway is better slow than
			// failing. No client-side retry quota: under a burst on one
			// account it runs dry within a second and turns a short
			// wait into failed requests; the backoff already spreads
			// the retries.
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = 6
				o.RateLimiter = ratelimit.None
				// A single-item write on an item that a transaction
				// holds is refused with TransactionConflictException;
				// it applied nothing, so trying again is safe.
				o.Retryables = append(o.Retryables, retry.RetryableErrorCode{
					Codes: map[string]struct{}{"TransactionConflictException": {}}})
			})
		}),
	}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	local := c.Endpoint != "" && os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == ""
	if local {
		// DynamoDB Local with no credentials configured: fixed ones,
		// without asking the instance metadata service, which a laptop
		// does not have.
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider("c0mputelocal", "c0mputelocal", "")))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("dynamo: aws config: %w", err)
	}
	if c.Endpoint != "" && cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			// DynamoDB Local's CRC32 header does not always match
			// its body; AWS's does.
			o.DisableValidateResponseChecksum = true
		}
	}), nil
}

// Open connects to the table described by c, creating it if it is missing
// (local and test tables; in AWS Terraform creates it first).
func Open(ctx context.Context, c Config, opts ...Option) (*Store, error) {
	if c.Table == "" {
		c.Table = schema.DefaultTable
	}
	db, err := NewClient(ctx, c)
	if err != nil {
		return nil, err
	}
	if err := schema.Ensure(ctx, db, c.Table); err != nil {
		return nil, fmt.Errorf("dynamo: %w", err)
	}
	return New(db, c.Table, opts...), nil
}

// Close implements store.Store. The client holds no resources that need
// releasing.
func (s *Store) Close() error { return nil }

// txFailed is a transaction cancelled because a condition failed. reasons
// has one entry per item, in order; Code is "ConditionalCheckFailed" for the
// items whose condition failed, and Item is that item as it was when the
// item asked for ALL_OLD.
type txFailed struct {
	reasons []types.CancellationReason
}

func (e *txFailed) Error() string {
	var codes []string
	for _, r := range e.reasons {
		codes = append(codes, aws.ToString(r.Code))
	}
	return "transaction cancelled: " + strings.Join(codes, ",")
}

// failed reports whether item i's condition failed.
func (e *txFailed) failed(i int) bool {
	return i < len(e.reasons) && aws.ToString(e.reasons[i].Code) == "ConditionalCheckFailed"
}

// old returns item i as it was, when its condition failed and it asked for
// ALL_OLD; nil if it did not exist.
func (e *txFailed) old(i int) map[string]types.AttributeValue {
	if !e.failed(i) {
		return nil
	}
	return e.reasons[i].Item
}

// transact runs a write transaction. A cancellation by failed conditions
// returns *txFailed; a cancellation by a conflicting transaction (another
// writer on one of the items) or by throttling is retried with backoff and
// jitter.
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) error {
	wait := conflictBaseWait
	for try := 0; ; try++ {
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		if err == nil {
			return nil
		}
		var tc *types.TransactionCanceledException
		if !errors.As(err, &tc) {
			var conflict *types.TransactionConflictException
			if errors.As(err, &conflict) && try < conflictRetries {
				if err := sleep(ctx, &wait); err != nil {
					return err
				}
				continue
			}
			return err
		}
		retryable, condition := false, false
		for _, r := range tc.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				condition = true
			case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded":
				// Another transaction held an item, or an item's
				// partition was throttled: a cancelled transaction
				// applied nothing, so it is safe to send again.
				retryable = true
			}
		}
		switch {
		case condition:
			return &txFailed{reasons: tc.CancellationReasons}
		case retryable && try < conflictRetries:
			if err := sleep(ctx, &wait); err != nil {
				return err
			}
		default:
			return err
		}
	}
}

// sleep waits a random time up to *wait (full jitter) and doubles *wait up
// to conflictMaxWait.
func sleep(ctx context.Context, wait *time.Duration) error {
	d := time.Duration(rand.Int64N(int64(*wait)) + 1)
	*wait = min(*wait*2, conflictMaxWait)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// isConditionFailed reports whether a single-item write lost its condition.
func isConditionFailed(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}
