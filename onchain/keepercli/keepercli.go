// Package keepercli is the c0mpute-keeper command: it runs the keeper's
// jobs (rewards, allowance, payouts) once, as the scheduled function will.
// Dry run by default: it reads the chain and the ledger, prints the full
// plan — who gets what and why, who is left out and why, the treasury's
// balances and what it owes, the fees — and writes nothing (the embedded
// store is opened read-only, and not created); -execute records the plan
// in the ledger and sends. The report is text for people, or with -json
// one JSON document (Report) for machines.
//
// A dry run needs only public keys ("treasury" in the configuration).
// The signing key, needed by -execute, comes from a Solana keypair file,
// an AWS Secrets Manager secret or an SSM SecureString parameter, never
// from an environment variable's value, and is never logged or printed.
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
	"slices"
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/pumpswap"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

const usage = `usage: c0mpute-keeper -config FILE [-execute] [-json] COMMAND [COMMAND FLAGS]

Flags may come before or after the command:
  c0mpute-keeper -config keeper.json rewards -at 2026-12-01
  c0mpute-keeper rewards -config keeper.json -at 2026-12-01 -json

commands:
  rewards [-at YYYY-MM-DD] [-reserve N]
        15:00 UTC treasury split of the revenue since the last split: half buys back and burns
        ZERO, half rewards stakers by matured stake. Customers' credits, workers' unpaid
        earnings and N USDC base units owed elsewhere (-reserve) are checked, never split
  allowance [-at YYYY-MM-DD]
        00:00 UTC staker perks (free-credit allowance, stake boost), and the keeper's lookup
        tables brought up to date
  payouts [-at YYYY-MM-DD]
        worker USDC payouts of the earnings in the store (at least $1 owed, to the account's
        payout wallet), once a day
  requested-payouts [-at TIME]
        the same, hourly, for the accounts whose owners asked for a payout (POST /v1/payouts);
        TIME (RFC 3339) names the hour
  payouts -id ID -owed FILE
        explicit USDC payouts; FILE is [{"owner": WALLET, "amount": USDC-BASE-UNITS}, …]; the
        same ID never pays twice
  inflow -id SIGNATURE
        records the USDC a transaction moved from fee_source (the network's share of ZERO
        trading fees) into the treasury, once; the next rewards run splits it
  help  this text

flags:
  -config FILE  the keeper's configuration, JSON (every key: onchain/keepercli/keeper.example.json);
                a dry run needs "treasury" (the keeper wallet's public key), -execute "key"
  -execute      record the plan in the ledger and send it. Without it, a dry run: it reads the
                chain and the ledger and writes nothing (an embedded store is opened read-only,
                and not created)
  -json         print the report as one JSON document (default: text)
  -at           the day (YYYY-MM-DD) or time (RFC 3339) to run for (default: now, UTC)
  -reserve N    rewards: USDC base units the treasury owes beyond what the store knows of
  -id, -owed    payouts and inflow, as above

exit status: 0 done; 1 failed; 2 bad command line; 3 incomplete (out of time, or a sent
transaction's outcome not known yet): nothing was sent twice, run it again to resume
`

// commandFlags are the flags each command takes, beyond -config,
// -execute and -json.
var commandFlags = map[string][]string{
	"rewards":           {"at", "reserve"},
	"allowance":         {"at"},
	"payouts":           {"at", "id", "owed"},
	"requested-payouts": {"at"},
	"inflow":            {"id"},
}

// options are a run's command line.
type options struct {
	command  string
	config   string
	execute  bool
	json     bool
	at       string
	id       string
	owed     string
	reserve  uint64
	set      map[string]bool
	showHelp bool
}

// parseArgs reads the command line: flags before and after the command
// (Go's flag package stops at the first argument that is not a flag, so
// the rest is parsed again).
func parseArgs(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("c0mpute-keeper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.config, "config", "", "")
	fs.BoolVar(&o.execute, "execute", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.at, "at", "", "")
	fs.StringVar(&o.id, "id", "", "")
	fs.StringVar(&o.owed, "owed", "", "")
	fs.Uint64Var(&o.reserve, "reserve", 0, "")
	var commands []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				o.showHelp = true
				return o, nil
			}
			return o, err
		}
		if rest = fs.Args(); len(rest) == 0 {
			break
		}
		commands, rest = append(commands, rest[0]), rest[1:]
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	switch {
	case slices.Contains(commands, "help"):
		o.showHelp = true
		return o, nil
	case len(commands) == 0:
		return o, errors.New("no command: want rewards, allowance, payouts, requested-payouts or inflow")
	case len(commands) > 1:
		return o, fmt.Errorf("one command at a time, got %s", strings.Join(commands, " "))
	}
	o.command = commands[0]
	allowed, ok := commandFlags[o.command]
	if !ok {
		return o, fmt.Errorf("unknown command %q: want rewards, allowance, payouts, requested-payouts or inflow", o.command)
	}
	for name := range o.set {
		if name != "config" && name != "execute" && name != "json" && !slices.Contains(allowed, name) {
			return o, fmt.Errorf("-%s does not apply to %s (it takes %s)", name, o.command, flagList(allowed))
		}
	}
	if o.config == "" {
		return o, errors.New("-config FILE is missing: the keeper's configuration (see onchain/keepercli/keeper.example.json)")
	}
	switch {
	case o.command == "inflow" && o.id == "":
		return o, errors.New("inflow needs -id SIGNATURE: the transaction that moved the fees into the treasury")
	case o.command == "payouts" && (o.id == "") != (o.owed == ""):
		return o, errors.New("payouts: -id and -owed go together (without both: the store's earnings)")
	case o.command == "payouts" && o.id != "" && o.set["at"]:
		return o, errors.New("payouts: -at is for the store's earnings, not with -id and -owed")
	}
	return o, nil
}

func flagList(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = "-" + n
	}
	return strings.Join(out, ", ")
}

// Main runs the command with args and returns the exit code: 0, 1 when
// the run failed, 2 for a bad command line, ExitIncomplete (3) when it
// stopped short and a re-run resumes it. The report goes to stdout,
// errors and logs to stderr.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, secrets SecretSource) int {
	o, err := parseArgs(args)
	if o.showHelp {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "c0mpute-keeper: %s\nrun c0mpute-keeper -h for the usage\n", err)
		return 2
	}
	if err := run(ctx, o, stdout, stderr, secrets); err != nil {
		for _, line := range strings.Split(errorText(err), "\n") {
			fmt.Fprintln(stderr, "c0mpute-keeper:", line)
		}
		if errors.Is(err, keeper.ErrOutOfTime) || errors.Is(err, keeper.ErrUnresolved) {
			return ExitIncomplete
		}
		return 1
	}
	return 0
}

// ExitIncomplete is the exit code of a run that stopped short — out of
// time, or a sent transaction's outcome not known yet — having sent
// nothing twice: run it again and it resumes from the ledger.
const ExitIncomplete = 3

// signer is the keeper's wallet, and with execute its signing key. A dry
// run with "treasury" set reads no key at all.
func signer(ctx context.Context, cfg Config, execute bool, secrets SecretSource) (solana.PublicKey, solana.PrivateKey, error) {
	var wallet solana.PublicKey
	if cfg.Treasury != "" {
		wallet = solana.MustPublicKeyFromBase58(cfg.Treasury) // validated by LoadConfig
		if !execute {
			return wallet, nil, nil
		}
	}
	if cfg.Key == "" {
		return wallet, nil, errors.New(`-execute needs "key" in the configuration: where the signing key is (file:PATH, secretsmanager:SECRET-ID or ssm:PARAMETER-NAME); a dry run needs only "treasury"`)
	}
	key, err := LoadKey(ctx, cfg.Key, secrets)
	if err != nil {
		return wallet, nil, err
	}
	if !wallet.IsZero() && !wallet.Equals(key.PublicKey()) {
		return wallet, nil, fmt.Errorf(`"treasury" is %s but "key" is the key of %s: they must be the same wallet`, wallet, key.PublicKey())
	}
	if !execute {
		// The key told the wallet; a dry run keeps nothing of it.
		return key.PublicKey(), nil, nil
	}
	return key.PublicKey(), key, nil
}

// runTime reads -at: a day, or a time (the hour names a requested-payouts
// run); now without it.
func runTime(at string) (time.Time, error) {
	if at == "" {
		return time.Now().UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, at); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, at); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("-at %q: want YYYY-MM-DD or an RFC 3339 time (2026-12-01T07:30:00Z)", at)
}

func run(ctx context.Context, o options, stdout, stderr io.Writer, secrets SecretSource) error {
	cfg, err := LoadConfig(o.config)
	if err != nil {
		return err
	}
	wallet, key, err := signer(ctx, cfg, o.execute, secrets)
	if err != nil {
		return err
	}
	now, err := runTime(o.at)
	if err != nil {
		return err
	}
	day := now.Truncate(24 * time.Hour)
	st, ledgerView, err := openLedger(ctx, cfg.Store, o.execute)
	if err != nil {
		return err
	}
	defer st.Close()
	// Every line names the command and its day, so that a deployment's
	// logs can be searched by them.
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("command", o.command, "day", keeper.Day(day), "execute", o.execute)
	client := newRPC(cfg.RPCURL)
	defer client.Close()
	ch := chain.New(client)
	ch.MaxPriorityFee = cfg.PriorityFeeCap
	ch.Log = log
	oc := onchain.Config{
		StakingProgram: solana.MustPublicKeyFromBase58(cfg.StakingProgram),
		RewardsProgram: solana.MustPublicKeyFromBase58(cfg.RewardsProgram),
		ZeroMint:       solana.MustPublicKeyFromBase58(cfg.ZeroMint),
		USDCMint:       solana.MustPublicKeyFromBase58(cfg.USDCMint),
		Treasury:       wallet,
	}
	fee, err := ch.PriorityFee(ctx, solana.PublicKeySlice{oc.USDCATA(wallet)})
	if err != nil {
		return err
	}
	k := &keeper.Keeper{Config: oc, Ledger: st, Earnings: st, Accounts: st, Stakes: client, Balances: ch, Reserved: o.reserve,
		TableRPC: client, AccountsRPC: client, Wallet: wallet}
	if cfg.PumpSwapPool != "" {
		pool, market, err := pumpswap.LoadPool(ctx, client, oc, solana.MustPublicKeyFromBase58(cfg.PumpSwapPool))
		if err != nil {
			return err
		}
		k.Swap = &pumpswap.Swapper{Pool: pool, Market: market, Reserves: ch, SlippageBasisPoints: cfg.SlippageBP}
	}
	// Without execute the executor holds no key: nothing can be signed.
	k.Exec = &keeper.Executor{Ledger: st, Chain: ch, Keeper: key, Build: k.Build, Prepare: k.Prepare, PriorityFee: fee, MaxResends: 3, Log: log}
	// The transfers load addresses from the keeper's lookup tables (the
	// allowance run at 00:00 keeps them up to date).
	if k.Exec.Tables, err = k.LookupTables(ctx); err != nil {
		return err
	}
	rep := Report{Command: o.command, Execute: o.execute, Day: keeper.Day(day), Ledger: ledgerView}
	// estimate prices a dry run's transfers.
	estimate := func(ts []store.Transfer) (*keeper.FeeEstimate, error) {
		if o.execute {
			return nil, nil
		}
		est, err := k.EstimateFees(ctx, ts, fee, k.Exec.Tables)
		return &est, err
	}
	switch o.command {
	case "rewards":
		// The buyback needs a pool; without one the dry run still prints
		// the plan, and execute refuses.
		if o.execute && k.Swap == nil {
			return errors.New(`rewards: set "pumpswap_pool" in the configuration to execute the buyback`)
		}
		r, err := k.Rewards(ctx, day.Add(15*time.Hour), o.execute)
		if err != nil {
			return err
		}
		est, err := estimate(r.Transfers)
		if err != nil {
			return err
		}
		rep.Rewards = rewardsView(oc, o.execute, r, est)
	case "allowance":
		// The day's staker perks: the free allowance and the stake boost.
		allowance, err := k.Allowance(ctx, day, cfg.AllowancePool, cfg.AllowanceCapBP, o.execute)
		if err != nil {
			return err
		}
		boosts, err := k.StakeBoostReport(ctx, day, cfg.StakeBoostMin, o.execute)
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
		for _, ow := range owed {
			if pk, err := solana.PublicKeyFromBase58(ow.Wallet); err == nil {
				payees = append(payees, pk)
			}
		}
		tables, err := k.EnsureTables(ctx, k.TableAddresses(all, payees), o.execute)
		if err != nil {
			return err
		}
		rep.Allowance, rep.StakeBoosts, rep.LookupTables = allowanceView(allowance), boostsView(boosts), tablesView(tables)
	case "inflow":
		rep.Day = ""
		if cfg.FeeSource == "" {
			return errors.New(`inflow: set "fee_source" in the configuration: the token account the trading fees are collected in`)
		}
		sig, err := solana.SignatureFromBase58(o.id)
		if err != nil {
			return fmt.Errorf("inflow: -id must be the transaction's signature: %w", err)
		}
		in, err := k.RecordInflow(ctx, sig, solana.MustPublicKeyFromBase58(cfg.FeeSource), o.execute)
		if err != nil {
			return err
		}
		rep.Inflow = inflowView(in, cfg.FeeSource)
	case "requested-payouts", "payouts":
		var p keeper.PayoutsReport
		switch {
		case o.command == "requested-payouts":
			rep.Day, rep.At = "", now.Truncate(time.Hour).Format(time.RFC3339)
			p, err = k.PayEarnings(ctx, now, true, o.execute)
		case o.id == "":
			p, err = k.PayEarnings(ctx, day, false, o.execute)
		default:
			rep.Day = ""
			var owed []keeper.Share
			if owed, err = readOwed(o.owed); err == nil {
				p, err = k.PayOwed(ctx, o.id, owed, o.execute)
			}
		}
		if err != nil {
			return err
		}
		est, err := estimate(p.Transfers)
		if err != nil {
			return err
		}
		rep.Payouts = payoutsView(oc, o.execute, p, est)
	default:
		return fmt.Errorf("unknown command %q", o.command)
	}
	if rep.Treasury, err = readTreasury(ctx, client, ch, oc); err != nil {
		return err
	}
	return rep.Write(stdout, o.json)
}

// readOwed reads an explicit payouts file.
func readOwed(path string) ([]keeper.Share, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("payouts: %w", err)
	}
	var owed []keeper.Share
	if err := json.Unmarshal(b, &owed); err != nil {
		return nil, fmt.Errorf(`payouts: %s: want [{"owner": WALLET, "amount": USDC-BASE-UNITS}, …]: %w`, path, err)
	}
	return owed, nil
}

// treasuryRPC reads the treasury's SOL and whether its USDC account exists.
type treasuryRPC interface {
	GetBalance(ctx context.Context, account solana.PublicKey, commitment rpc.CommitmentType) (*rpc.GetBalanceResult, error)
	GetAccountInfoWithOpts(ctx context.Context, account solana.PublicKey, opts *rpc.GetAccountInfoOpts) (*rpc.GetAccountInfoResult, error)
}

// readTreasury reads the keeper wallet's balances, at the chain's
// commitment.
func readTreasury(ctx context.Context, client treasuryRPC, ch *chain.Chain, c onchain.Config) (TreasuryView, error) {
	ata := c.USDCATA(c.Treasury)
	v := TreasuryView{Wallet: c.Treasury.String(), USDCAccount: ata.String(), USDC: units6(0)}
	lamports, err := client.GetBalance(ctx, c.Treasury, ch.Commitment)
	if err != nil {
		return v, fmt.Errorf("treasury SOL balance: %w", err)
	}
	v.SOL = sol(lamports.Value)
	_, err = client.GetAccountInfoWithOpts(ctx, ata, &rpc.GetAccountInfoOpts{Commitment: ch.Commitment,
		DataSlice: &rpc.DataSlice{Offset: ptr(uint64(0)), Length: ptr(uint64(0))}})
	if errors.Is(err, rpc.ErrNotFound) {
		return v, nil
	}
	if err != nil {
		return v, fmt.Errorf("treasury USDC account: %w", err)
	}
	usdc, err := ch.TokenBalance(ctx, ata)
	if err != nil {
		return v, fmt.Errorf("treasury USDC balance: %w", err)
	}
	v.USDCAccountExists, v.USDC = true, units6(usdc)
	return v, nil
}

func ptr[T any](v T) *T { return &v }
