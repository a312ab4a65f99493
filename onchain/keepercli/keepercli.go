// Package keepercli is the c0mpute-keeper command: it runs the keeper's
// jobs (rewards, allowance, payouts) once, as the scheduled function will.
// Dry run by default: it prints the full plan and writes nothing; --execute
// records the plan in the ledger and sends.
//
// The signing key comes from a Solana keypair file, an AWS Secrets Manager
// secret or an SSM SecureString parameter, never from an environment
// variable's value, and is never logged or printed.
package keepercli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/go-playground/validator/v10"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/pumpswap"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// Config is the keeper's configuration file (JSON).
type Config struct {
	RPCURL         string `json:"rpc_url" validate:"required,url"`
	StakingProgram string `json:"staking_program" validate:"required,pubkey"`
	RewardsProgram string `json:"rewards_program" validate:"required,pubkey"`
	ZeroMint       string `json:"zero_mint" validate:"required,pubkey"`
	USDCMint       string `json:"usdc_mint" validate:"required,pubkey"`
	// Store is the ledger: a file path (the embedded store) or
	// "dynamodb:TABLE" (DynamoDB, at C0MPUTE_DYNAMODB_ENDPOINT or through
	// the usual AWS configuration).
	Store string `json:"store" validate:"required"`
	// Key is where the keeper's signing key lives: file:PATH,
	// secretsmanager:SECRET-ID or ssm:PARAMETER-NAME. The keeper's wallet
	// is the treasury.
	Key string `json:"key" validate:"required,startswith=file:|startswith=secretsmanager:|startswith=ssm:"`
	// PumpSwapPool is the ZERO/USDC pool the buyback and auto-compound
	// buy on; SlippageBP how far below the quote a buy may fill.
	PumpSwapPool string `json:"pumpswap_pool" validate:"omitempty,pubkey"`
	SlippageBP   uint64 `json:"slippage_bp" validate:"lte=5000"`
	// PriorityFeeCap caps the priority fee, micro-lamports per CU.
	PriorityFeeCap uint64 `json:"priority_fee_cap"`
	// AllowancePool and AllowanceCapBP: SPEC defaults 5,000 credits, 25%.
	AllowancePool  int64 `json:"allowance_pool" validate:"gte=0"`
	AllowanceCapBP int64 `json:"allowance_cap_bp" validate:"gte=0,lte=10000"`
	// FeeSource is the USDC token account the network's share of ZERO
	// trading fees is collected in; inflow records what moves from it
	// into the treasury.
	FeeSource string `json:"fee_source" validate:"omitempty,pubkey"`
	// StakeBoostMin is the matured stake, in ZERO base units, whose
	// payout accounts earn the boosted worker share (SPEC: 500,000 ZERO).
	StakeBoostMin uint64 `json:"stake_boost_min" validate:"gt=0"`
}

var validate = func() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	_ = v.RegisterValidation("pubkey", func(fl validator.FieldLevel) bool {
		_, err := solana.PublicKeyFromBase58(fl.Field().String())
		return err == nil
	})
	return v
}()

// ledger is the store the keeper records its runs in.
type ledger interface {
	store.Ledger
	store.Earnings
	keeper.Accounts
	Close() error
}

// openLedger opens the ledger a configuration's store names.
func openLedger(ctx context.Context, where string) (ledger, error) {
	if table, ok := strings.CutPrefix(where, "dynamodb:"); ok {
		// The table exists (Terraform, or the dev runner, made it): the
		// keeper needs no right to describe or create tables.
		db, err := dynamo.NewClient(ctx, dynamo.ConfigFromEnv())
		if err != nil {
			return nil, err
		}
		return dynamo.New(db, table), nil
	}
	return embedded.Open(where)
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("keeper: config: %w", err)
	}
	c := Config{AllowancePool: 5000, AllowanceCapBP: 2500, PriorityFeeCap: 1_000_000, SlippageBP: 100,
		StakeBoostMin: keeper.DefaultBoostMin}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("keeper: config %s: %w", path, err)
	}
	if err := validate.Struct(c); err != nil {
		return Config{}, fmt.Errorf("keeper: config %s: %w", path, err)
	}
	return c, nil
}

// SecretSource fetches a secret string by name (Secrets Manager or SSM).
type SecretSource func(ctx context.Context, kind, name string) (string, error)

// AWSSecrets reads secrets with the default AWS credential chain.
func AWSSecrets(ctx context.Context, kind, name string) (string, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", fmt.Errorf("aws config: %w", err)
	}
	switch kind {
	case "secretsmanager":
		out, err := secretsmanager.NewFromConfig(cfg).GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(name)})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.SecretString), nil
	case "ssm":
		out, err := ssm.NewFromConfig(cfg).GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(name), WithDecryption: aws.Bool(true)})
		if err != nil {
			return "", err
		}
		if out.Parameter == nil {
			return "", errors.New("empty parameter")
		}
		return aws.ToString(out.Parameter.Value), nil
	}
	return "", fmt.Errorf("unknown secret kind %q", kind)
}

// LoadKey loads the signing key named by ref. The key's bytes never appear
// in an error.
func LoadKey(ctx context.Context, ref string, secrets SecretSource) (solana.PrivateKey, error) {
	kind, name, ok := strings.Cut(ref, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("keeper: key reference %q: want file:, secretsmanager: or ssm:", ref)
	}
	var raw string
	switch kind {
	case "file":
		st, err := os.Stat(name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key file: %w", err)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("keeper: key file %s is readable by others (mode %o); chmod 600 it", name, st.Mode().Perm())
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key file: %w", err)
		}
		raw = string(b)
	case "secretsmanager", "ssm":
		if secrets == nil {
			return nil, errors.New("keeper: no secret source")
		}
		s, err := secrets(ctx, kind, name)
		if err != nil {
			return nil, fmt.Errorf("keeper: key from %s %s: %w", kind, name, err)
		}
		raw = s
	default:
		return nil, fmt.Errorf("keeper: key reference kind %q: want file, secretsmanager or ssm", kind)
	}
	k, err := onchain.ParseKey(raw)
	if err != nil {
		return nil, fmt.Errorf("keeper: %w", err)
	}
	return k, nil
}

const usage = `usage: c0mpute-keeper -config FILE [-execute] COMMAND

commands:
  rewards  [-at YYYY-MM-DD] [-reserve N]
                                   15:00 UTC treasury split: buyback and burn, staker rewards;
                                   the workers' unpaid earnings in the store, plus N USDC base
                                   units owed elsewhere, are never split
  allowance [-at YYYY-MM-DD]       00:00 UTC staker perks (free-credit allowance, stake boost),
                                   and the keeper's lookup tables brought up to date
  payouts  [-at YYYY-MM-DD]        worker USDC payouts of the earnings in the store (at least $1
                                   owed, to the account's payout wallet), once a day
  requested-payouts [-at TIME]     the same, hourly, for the accounts whose owners asked for a
                                   payout (POST /v1/payouts); TIME (RFC 3339) names the hour
  inflow -id SIGNATURE             records the USDC a transaction moved from fee_source (the
                                   network's share of ZERO trading fees) into the treasury, once;
                                   the next rewards run splits it with the day's revenue
  payouts  -id ID -owed FILE       explicit USDC payouts; FILE is [{"owner","amount"}] in USDC
                                   base units; the same ID never pays twice

Dry run by default: prints the full plan as JSON and writes nothing.
`

// Main runs the command with args and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, secrets SecretSource) int {
	fs := flag.NewFlagSet("c0mpute-keeper", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	cfgPath := fs.String("config", "", "configuration file")
	execute := fs.Bool("execute", false, "record and send (default: dry run)")
	atFlag := fs.String("at", "", "day, YYYY-MM-DD (default: today, UTC)")
	id := fs.String("id", "", "payout run id")
	owedPath := fs.String("owed", "", "payouts file")
	reserve := fs.Uint64("reserve", 0, "rewards: USDC base units the treasury owes beyond customers' credits and workers' earnings (the store counts those): checked, never split")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 || *cfgPath == "" {
		fs.Usage()
		return 2
	}
	if err := run(ctx, fs.Arg(0), *cfgPath, *execute, *atFlag, *id, *owedPath, *reserve, stdout, stderr, secrets); err != nil {
		fmt.Fprintln(stderr, "c0mpute-keeper:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, cmd, cfgPath string, execute bool, atFlag, id, owedPath string, reserve uint64, stdout, stderr io.Writer, secrets SecretSource) error {
	cfg, err := LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	key, err := LoadKey(ctx, cfg.Key, secrets)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	if atFlag != "" {
		// A day, or a time (the hour names a requested-payouts run).
		if now, err = time.Parse(time.RFC3339, atFlag); err != nil {
			if now, err = time.Parse(time.DateOnly, atFlag); err != nil {
				return fmt.Errorf("-at %q: want YYYY-MM-DD or an RFC 3339 time", atFlag)
			}
		}
	}
	day := now.UTC().Truncate(24 * time.Hour)
	st, err := openLedger(ctx, cfg.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	client := rpc.New(cfg.RPCURL)
	ch := chain.New(client)
	ch.MaxPriorityFee = cfg.PriorityFeeCap
	ch.Log = log
	oc := onchain.Config{
		StakingProgram: solana.MustPublicKeyFromBase58(cfg.StakingProgram),
		RewardsProgram: solana.MustPublicKeyFromBase58(cfg.RewardsProgram),
		ZeroMint:       solana.MustPublicKeyFromBase58(cfg.ZeroMint),
		USDCMint:       solana.MustPublicKeyFromBase58(cfg.USDCMint),
		Treasury:       key.PublicKey(),
	}
	fee, err := ch.PriorityFee(ctx, solana.PublicKeySlice{oc.USDCATA(key.PublicKey())})
	if err != nil {
		return err
	}
	k := &keeper.Keeper{Config: oc, Ledger: st, Earnings: st, Accounts: st, Stakes: client, Balances: ch, Reserved: reserve,
		TableRPC: client, AccountsRPC: client}
	if cfg.PumpSwapPool != "" {
		pool, market, err := pumpswap.LoadPool(ctx, client, oc, solana.MustPublicKeyFromBase58(cfg.PumpSwapPool))
		if err != nil {
			return err
		}
		k.Swap = &pumpswap.Swapper{Pool: pool, Market: market, Reserves: ch, SlippageBasisPoints: cfg.SlippageBP}
	}
	k.Exec = &keeper.Executor{Ledger: st, Chain: ch, Keeper: key, Build: k.Build, Prepare: k.Prepare, PriorityFee: fee, MaxResends: 3, Log: log}
	// The transfers load addresses from the keeper's lookup tables (the
	// allowance run at 00:00 keeps them up to date).
	if k.Exec.Tables, err = k.LookupTables(ctx); err != nil {
		return err
	}
	out := json.NewEncoder(stdout)
	out.SetIndent("", "  ")
	switch cmd {
	case "rewards":
		// The buyback needs a pool; without one the dry run still prints
		// the plan, and execute refuses.
		if execute && k.Swap == nil {
			return errors.New("rewards: set pumpswap_pool in the config to execute the buyback")
		}
		rep, err := k.Rewards(ctx, day.Add(15*time.Hour), execute)
		if err != nil {
			return err
		}
		return out.Encode(rep)
	case "allowance":
		// The day's staker perks: the free allowance and the stake boost.
		allowance, err := k.Allowance(ctx, day, cfg.AllowancePool, cfg.AllowanceCapBP, execute)
		if err != nil {
			return err
		}
		boosts, err := k.StakeBoosts(ctx, day, cfg.StakeBoostMin, execute)
		if err != nil {
			return err
		}
		// Then the lookup tables: every address the day's rewards and
		// payouts will touch, hours before they run.
		all, err := stakes.Read(ctx, client, oc)
		if err != nil {
			return err
		}
		owed, err := st.OwedEarnings(ctx, 1)
		if err != nil {
			return err
		}
		var payees []solana.PublicKey
		for _, o := range owed {
			if pk, err := solana.PublicKeyFromBase58(o.Wallet); err == nil {
				payees = append(payees, pk)
			}
		}
		tables, err := k.EnsureTables(ctx, k.TableAddresses(all, payees), execute)
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"allowance": allowance, "stake_boosts": boosts, "lookup_tables": tables})
	case "inflow":
		if cfg.FeeSource == "" {
			return errors.New("inflow: set fee_source in the config: the token account the trading fees are collected in")
		}
		sig, err := solana.SignatureFromBase58(id)
		if err != nil {
			return fmt.Errorf("inflow: -id must be the transaction's signature: %w", err)
		}
		in, err := k.RecordInflow(ctx, sig, solana.MustPublicKeyFromBase58(cfg.FeeSource), execute)
		if err != nil {
			return err
		}
		return out.Encode(in)
	case "requested-payouts":
		ts, res, err := k.RequestedPayouts(ctx, now, execute)
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"transfers": ts, "result": res})
	case "payouts":
		if id == "" && owedPath == "" {
			ts, res, err := k.EarningsPayouts(ctx, day, execute)
			if err != nil {
				return err
			}
			return out.Encode(map[string]any{"transfers": ts, "result": res})
		}
		if id == "" || owedPath == "" {
			return errors.New("payouts: -id and -owed go together (without both: the store's earnings)")
		}
		b, err := os.ReadFile(owedPath)
		if err != nil {
			return err
		}
		var owed []keeper.Share
		if err := json.Unmarshal(b, &owed); err != nil {
			return fmt.Errorf("payouts: %s: %w", owedPath, err)
		}
		ts, res, err := k.Payouts(ctx, id, owed, execute)
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"transfers": ts, "result": res})
	}
	return fmt.Errorf("unknown command %q", cmd)
}
