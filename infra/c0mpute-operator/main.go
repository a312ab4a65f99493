// Command c0mpute-operator is the operator's hand on the network, straight
// on the store: bootstrap accounts and credits (each grant a ledger entry
// with its reason), see and revoke any account's API keys and worker
// tokens, read an account's ledger, see every account's worker identities
// with their standing, counts, speed and earnings (what GET /v1/workers
// shows an account), and mark an identity as a trusted reference worker
// for canaries.
//
// The store is the one C0MPUTE_STORE names: dynamodb (the deployed table:
// C0MPUTE_DYNAMODB_TABLE, AWS credentials from the environment,
// C0MPUTE_DYNAMODB_ENDPOINT for DynamoDB Local) or embedded (the local
// network's file under C0MPUTE_HOME, default .c0mpute, which only one
// process opens at a time: stop c0mpute-dev first). With
// C0MPUTE_CONNECTIONS_URL (the relay's management endpoint, as the
// functions have it) revoke-token also closes the token's live workers.
//
//	c0mpute-operator account ID [-wallet ADDRESS]
//	c0mpute-operator grant ACCOUNT CREDITS REASON
//	c0mpute-operator key ACCOUNT [-name NAME]
//	c0mpute-operator keys ACCOUNT | tokens ACCOUNT
//	c0mpute-operator revoke-key ACCOUNT ID | revoke-token ACCOUNT ID
//	c0mpute-operator ledger ACCOUNT [-limit N]
//	c0mpute-operator workers [-account ID] [-json]
//	c0mpute-operator trust ACCOUNT PUBKEY
//	c0mpute-operator untrust ACCOUNT PUBKEY
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/apigatewaymanagementapi"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/connections"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

const usage = `usage:
  c0mpute-operator account ID [-wallet ADDRESS]    create an account (its id; a wallet address, optional)
  c0mpute-operator grant ACCOUNT CREDITS REASON    grant credits once per REASON (a ledger entry; 1 credit = $0.01)
  c0mpute-operator key ACCOUNT [-name NAME]        issue an API key for an account (shown once)
  c0mpute-operator keys ACCOUNT                    list an account's API keys
  c0mpute-operator tokens ACCOUNT                  list an account's worker tokens
  c0mpute-operator revoke-key ACCOUNT ID           revoke an API key
  c0mpute-operator revoke-token ACCOUNT ID         revoke a worker token (its live workers are refused from their next connect)
  c0mpute-operator ledger ACCOUNT [-limit N]       an account's ledger, newest first
  c0mpute-operator workers [-account ID] [-json]   list worker identities (all accounts by default)
  c0mpute-operator trust ACCOUNT PUBKEY            make an identity a trusted canary reference
  c0mpute-operator untrust ACCOUNT PUBKEY          undo trust`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "c0mpute-operator:", err)
		os.Exit(2)
	}
}

// Store is what the command needs from the store.
type Store interface {
	CreateAccount(ctx context.Context, a store.Account) error
	GetAccount(ctx context.Context, id string) (store.Account, error)
	Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error)
	PutAPIKey(ctx context.Context, s store.Secret) error
	ListAPIKeys(ctx context.Context, accountID string) ([]store.Secret, error)
	RevokeAPIKey(ctx context.Context, accountID, id string, at time.Time) error
	ListWorkerTokens(ctx context.Context, accountID string) ([]store.Secret, error)
	RevokeWorkerToken(ctx context.Context, accountID, id string, at time.Time) ([]string, error)
	Entries(ctx context.Context, accountID, before string, limit int) ([]store.Entry, error)
	Reputations(ctx context.Context, accountID string) ([]store.Reputation, error)
	Workers(ctx context.Context) ([]store.Worker, error)
	SetTrusted(ctx context.Context, accountID, pubkey string, trusted bool) error
	Close() error
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	st, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if url := os.Getenv("C0MPUTE_CONNECTIONS_URL"); url != "" {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return err
		}
		ctx = withCloser(ctx, connections.New(apigatewaymanagementapi.NewFromConfig(awsCfg, func(o *apigatewaymanagementapi.Options) {
			o.BaseEndpoint = aws.String(url)
		})))
	}
	return command(ctx, st, args, out)
}

// command runs one command on st.
func command(ctx context.Context, st Store, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	if run, ok := accountCommands[args[0]]; ok {
		return run(ctx, st, args[1:], out)
	}
	switch args[0] {
	case "workers":
		fs := flag.NewFlagSet("workers", flag.ContinueOnError)
		account := fs.String("account", "", "only this account's workers")
		asJSON := fs.Bool("json", false, "print JSON (the shape of GET /v1/workers, with account_id)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		views, err := workers(ctx, st, *account)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(out)
			enc.SetIndent("", "  ")
			return enc.Encode(views)
		}
		return table(out, views)
	case "trust", "untrust":
		if len(args) != 3 {
			return errors.New(usage)
		}
		if err := st.SetTrusted(ctx, args[1], args[2], args[0] == "trust"); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("no worker identity %s ever connected on account %s", args[2], args[1])
			}
			return err
		}
		_, err := fmt.Fprintf(out, "%s %s on %s\n", map[bool]string{true: "trusted", false: "untrusted"}[args[0] == "trust"], args[2], args[1])
		return err
	}
	return errors.New(usage)
}

// workers is the operator's view: every identity (of one account, or of
// all), with its account.
func workers(ctx context.Context, st Store, account string) ([]api.WorkerView, error) {
	reps, err := st.Reputations(ctx, account)
	if err != nil {
		return nil, err
	}
	live, err := st.Workers(ctx)
	if err != nil {
		return nil, err
	}
	ids := map[string]string{}
	seen := map[string]bool{}
	for _, r := range reps {
		if seen[r.AccountID] {
			continue
		}
		seen[r.AccountID] = true
		toks, err := st.ListWorkerTokens(ctx, r.AccountID)
		if err != nil {
			return nil, err
		}
		for _, t := range toks {
			ids[t.Hash] = t.ID
		}
	}
	views := api.WorkerViews(reps, live, ids)
	for i := range views {
		views[i].AccountID = reps[i].AccountID
	}
	return views, nil
}

func table(out io.Writer, views []api.WorkerView) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tWORKER\tTOKEN\tSTATE\tSTRIKES\tJOBS\tREJECTED\tCANARIES\tTOK/S\tEARNED\tLAST STRIKE")
	for _, v := range views {
		state := v.State
		if v.Trusted {
			state += " (trusted)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%.1f\t%d\t%s\n", v.AccountID, v.ID, v.TokenID, state, v.Strikes,
			v.JobsCompleted, v.JobsRejected, v.CanariesPassed, v.CanariesPassed+v.CanariesFailed, v.TokensPerSecond,
			v.EarnedCredits, v.LastReason)
	}
	return tw.Flush()
}

func openStore(ctx context.Context) (Store, error) {
	switch kind := os.Getenv("C0MPUTE_STORE"); kind {
	case "", "embedded":
		home := os.Getenv("C0MPUTE_HOME")
		if home == "" {
			home = ".c0mpute"
		}
		path := filepath.Join(home, "c0mpute.db")
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("no local network store at %s (set C0MPUTE_HOME, or C0MPUTE_STORE=dynamodb): %w", path, err)
		}
		st, err := embedded.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%w (is c0mpute-dev running? it holds the file: stop it first)", err)
		}
		return st, nil
	case "dynamodb":
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		return dynamo.Open(ctx, dynamo.ConfigFromEnv())
	default:
		return nil, fmt.Errorf("C0MPUTE_STORE is %q: want embedded or dynamodb", kind)
	}
}
