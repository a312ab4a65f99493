package keepercli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/onchain/keeper"
)

// ledger is the store the keeper records its runs in.
type ledger interface {
	store.Ledger
	store.Earnings
	keeper.Accounts
	Close() error
}

// How a run holds its ledger (LedgerView.Access).
const (
	accessReadWrite = "read_write"
	// accessReadOnly: a dry run, which only reads (the embedded store is
	// opened read-only, so nothing could write).
	accessReadOnly = "read_only"
	// accessEmpty: a dry run whose embedded store does not exist yet:
	// planned against an empty ledger, the file not created.
	accessEmpty = "empty"
)

// openLedger opens the ledger a configuration's store names: to write it
// with execute; otherwise so that nothing can be written, and without
// creating it.
func openLedger(ctx context.Context, where string, execute bool) (ledger, LedgerView, error) {
	view := LedgerView{Store: where, Access: accessReadWrite}
	if !execute {
		view.Access = accessReadOnly
	}
	if table, ok := strings.CutPrefix(where, "dynamodb:"); ok {
		// The table exists (Terraform, or the dev runner, made it): the
		// keeper needs no right to describe or create tables. A dry run
		// only reads (the keeper's jobs write nothing without execute).
		db, err := dynamo.NewClient(ctx, dynamo.ConfigFromEnv())
		if err != nil {
			return nil, view, fmt.Errorf("store %s: %w", where, err)
		}
		return dynamo.New(db, table), view, nil
	}
	if execute {
		st, err := embedded.Open(where)
		return st, view, err
	}
	st, err := embedded.Open(where, embedded.ReadOnly())
	if errors.Is(err, fs.ErrNotExist) {
		view.Access = accessEmpty
		tmp, err := emptyLedger()
		return tmp, view, err
	}
	return st, view, err
}

// emptyLedger is an embedded store in a temporary folder, removed when it
// closes: the ledger of a dry run whose store does not exist yet.
func emptyLedger() (ledger, error) {
	dir, err := os.MkdirTemp("", "c0mpute-keeper-dry-run-")
	if err != nil {
		return nil, fmt.Errorf("empty ledger: %w", err)
	}
	st, err := embedded.Open(filepath.Join(dir, "ledger.db"), embedded.WithNoSync())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("empty ledger: %w", err), os.RemoveAll(dir))
	}
	return tempLedger{st, dir}, nil
}

type tempLedger struct {
	*embedded.Store
	dir string
}

func (t tempLedger) Close() error { return errors.Join(t.Store.Close(), os.RemoveAll(t.dir)) }
