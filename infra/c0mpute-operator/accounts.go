package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/c0mpute/c0mpute/functions/credential"
	"github.com/c0mpute/c0mpute/functions/store"
)

// accountCommands bootstrap and look after accounts: what an operator
// does before sign-in and deposits exist, and when a user needs help.
var accountCommands = map[string]func(ctx context.Context, st Store, args []string, out io.Writer) error{
	"account":      createAccount,
	"grant":        grant,
	"key":          issueKey,
	"keys":         listSecrets("key", Store.ListAPIKeys),
	"tokens":       listSecrets("token", Store.ListWorkerTokens),
	"revoke-key":   revokeKey,
	"revoke-token": revokeToken,
	"ledger":       ledger,
}

// args parses a command's flags and checks its positional arguments.
func args(fs *flag.FlagSet, in []string, n int) ([]string, error) {
	fs.SetOutput(io.Discard)
	// Flags may come after the positional arguments.
	var pos []string
	for len(in) > 0 {
		if err := fs.Parse(in); err != nil {
			return nil, fmt.Errorf("%w\n%s", err, usage)
		}
		in = fs.Args()
		if len(in) > 0 {
			pos, in = append(pos, in[0]), in[1:]
		}
	}
	if len(pos) != n {
		return nil, errors.New(usage)
	}
	return pos, nil
}

func createAccount(ctx context.Context, st Store, in []string, out io.Writer) error {
	fs := flag.NewFlagSet("account", flag.ContinueOnError)
	wallet := fs.String("wallet", "", "the account's Solana wallet address")
	pos, err := args(fs, in, 1)
	if err != nil {
		return err
	}
	err = st.CreateAccount(ctx, store.Account{ID: pos[0], Wallet: *wallet, CreatedAt: time.Now()})
	if errors.Is(err, store.ErrExists) {
		return fmt.Errorf("account %s exists already", pos[0])
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "created account %s\n", pos[0])
	return err
}

// grant gives credits once per reason: the reason is the grant's
// idempotency key, so running the same grant twice gives once.
func grant(ctx context.Context, st Store, in []string, out io.Writer) error {
	pos, err := args(flag.NewFlagSet("grant", flag.ContinueOnError), in, 3)
	if err != nil {
		return err
	}
	credits, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || credits < 1 {
		return fmt.Errorf("CREDITS must be a positive whole number (1 credit = $0.01), not %q", pos[1])
	}
	applied, err := st.Grant(ctx, pos[0], credits, "operator:"+pos[2], false)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no account %s (create it with: c0mpute-operator account %s)", pos[0], pos[0])
	}
	if err != nil {
		return err
	}
	a, err := st.GetAccount(ctx, pos[0])
	if err != nil {
		return err
	}
	if !applied {
		_, err = fmt.Fprintf(out, "a grant for %q was made already: nothing changed; balance %d credits\n", pos[2], a.Credits)
		return err
	}
	_, err = fmt.Fprintf(out, "granted %d credits to %s for %q; balance %d credits\n", credits, pos[0], pos[2], a.Credits)
	return err
}

func issueKey(ctx context.Context, st Store, in []string, out io.Writer) error {
	fs := flag.NewFlagSet("key", flag.ContinueOnError)
	name := fs.String("name", "operator", "the key's name")
	pos, err := args(fs, in, 1)
	if err != nil {
		return err
	}
	if _, err := st.GetAccount(ctx, pos[0]); err != nil {
		return fmt.Errorf("account %s: %w", pos[0], err)
	}
	secret, hash, id := credential.New(credential.APIKeyPrefix)
	err = st.PutAPIKey(ctx, store.Secret{Hash: hash, ID: id, AccountID: pos[0], Name: *name, CreatedAt: time.Now()})
	if errors.Is(err, store.ErrLimit) {
		return fmt.Errorf("account %s has %d active API keys already: revoke one first", pos[0], store.MaxActiveKeys)
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\t%s (shown once)\n", id, secret)
	return err
}

func listSecrets(what string, list func(Store, context.Context, string) ([]store.Secret, error)) func(context.Context, Store, []string, io.Writer) error {
	return func(ctx context.Context, st Store, in []string, out io.Writer) error {
		pos, err := args(flag.NewFlagSet(what+"s", flag.ContinueOnError), in, 1)
		if err != nil {
			return err
		}
		ss, err := list(st, ctx, pos[0])
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tCREATED\tSTATE\tLIMIT\tUSAGE")
		for _, s := range ss {
			state := "active"
			if !s.Active() {
				state = "revoked"
			} else if s.Expired(time.Now()) {
				state = "expired"
			}
			limit := "-"
			if s.Limit > 0 {
				limit = fmt.Sprintf("%d %s", s.Limit, s.LimitReset)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", s.ID, s.Name, s.CreatedAt.UTC().Format(time.RFC3339), state, limit, s.Usage)
		}
		return tw.Flush()
	}
}

func revokeKey(ctx context.Context, st Store, in []string, out io.Writer) error {
	pos, err := args(flag.NewFlagSet("revoke-key", flag.ContinueOnError), in, 2)
	if err != nil {
		return err
	}
	if err := st.RevokeAPIKey(ctx, pos[0], pos[1], time.Now()); err != nil {
		return fmt.Errorf("revoke key %s of %s: %w", pos[1], pos[0], err)
	}
	_, err = fmt.Fprintf(out, "revoked key %s\n", pos[1])
	return err
}

// revokeToken revokes a worker token: the store refuses its workers from
// their next connect, and the ones live now are closed through the relay's
// management API when the command can reach it (C0MPUTE_CONNECTIONS_URL
// and AWS credentials: closer), else named for the operator.
func revokeToken(ctx context.Context, st Store, in []string, out io.Writer) error {
	pos, err := args(flag.NewFlagSet("revoke-token", flag.ContinueOnError), in, 2)
	if err != nil {
		return err
	}
	conns, err := st.RevokeWorkerToken(ctx, pos[0], pos[1], time.Now())
	if err != nil {
		return fmt.Errorf("revoke token %s of %s: %w", pos[1], pos[0], err)
	}
	closer := closerFrom(ctx)
	closed := 0
	for _, c := range conns {
		if closer == nil {
			break
		}
		if err := closer.Delete(ctx, c); err != nil {
			fmt.Fprintf(out, "close connection %s: %v\n", c, err)
			continue
		}
		closed++
	}
	if len(conns) > closed {
		_, err = fmt.Fprintf(out, "revoked token %s; %d live connections not closed (set C0MPUTE_CONNECTIONS_URL to close them, or they end at their next reconnect): %v\n",
			pos[1], len(conns)-closed, conns)
		return err
	}
	_, err = fmt.Fprintf(out, "revoked token %s; closed %d live connections\n", pos[1], closed)
	return err
}

// Closer closes relay connections (the management API).
type Closer interface {
	Delete(ctx context.Context, conn string) error
}

type closerKey struct{}

// withCloser gives the commands a way to close connections.
func withCloser(ctx context.Context, c Closer) context.Context {
	return context.WithValue(ctx, closerKey{}, c)
}

func closerFrom(ctx context.Context) Closer {
	c, _ := ctx.Value(closerKey{}).(Closer)
	return c
}

func ledger(ctx context.Context, st Store, in []string, out io.Writer) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	limit := fs.Int("limit", 50, "entries to show, newest first (at most 1000)")
	pos, err := args(fs, in, 1)
	if err != nil {
		return err
	}
	es, err := st.Entries(ctx, pos[0], "", *limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tCREDITS\tALLOWANCE\tJOB\tREF")
	for _, e := range es {
		fmt.Fprintf(tw, "%s\t%s\t%+d\t%+d\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Kind, e.Credits, e.Allowance, e.JobID, e.Ref)
	}
	return tw.Flush()
}
