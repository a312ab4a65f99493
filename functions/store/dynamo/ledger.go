package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// The keeper's ledger (store.Ledger). Items:
//
//	KRUN#<run> / RUN              the run: state, transfers added, count sealed
//	KRUN#<run> / T#<seq>#<key>    the run's transfers in Seq order (index)
//	XFER#<key> / XFER             a transfer, by its idempotency key
//	CARRY#<name> / CARRY          a carried remainder
//	ALLOW#<account>#<day> / ALLOW the daily allowance's idempotency item
//
// Every method is one transaction except ResetPlan, which deletes a large
// plan in several (the run stays planning until all are gone, so a crash
// between them is finished by the next reset), and the reads.
const (
	pRun    = "KRUN#"
	sRun    = "RUN"
	sRunIdx = "T#"
	pXfer   = "XFER#"
	pCarry  = "CARRY#"
	pAllow  = "ALLOW#"
	// pAllowDay lists the accounts given a positive allowance for a day:
	// ALLOWDAY#<day> / ACCT#<account>.
	pAllowDay = "ALLOWDAY#"

	aAdded     = "added"
	aTransfers = "transfers"
	aSummary   = "summary"
	aCompleted = "completed"
	aSig       = "signature"
	aLastValid = "last_valid_block_height"
	aValue     = "value"
	aPaidOut   = "paid_out"
)

// maxTransfersPerWrite keeps MarkSent and Settle inside one transaction of
// at most 100 items, with room for the runs' condition checks.
const maxTransfersPerWrite = 90

var _ store.Ledger = (*Store)(nil)

func runKey(id string) key { return key{pRun + id, sRun} }
func runIdxKey(run string, seq int, k string) key {
	return key{pRun + run, fmt.Sprintf("%s%020d#%s", sRunIdx, seq, k)}
}
func xferKey(k string) key { return key{pXfer + k, "XFER"} }

type runItem struct {
	key
	ID        string `dynamodbav:"id"`
	State     string `dynamodbav:"state"`
	Added     int64  `dynamodbav:"added"`
	Transfers int64  `dynamodbav:"transfers"`
	Summary   string `dynamodbav:"summary,omitempty"`
	Created   int64  `dynamodbav:"created,omitempty"`
	Updated   int64  `dynamodbav:"updated,omitempty"`
	Completed int64  `dynamodbav:"completed,omitempty"`
	GPK       string `dynamodbav:"gpk,omitempty"`
	GSK       string `dynamodbav:"gsk,omitempty"`
}

// gOpenRuns is the index partition of the runs not done.
const gOpenRuns = "K#open"

func (i runItem) run() store.KeeperRun {
	return store.KeeperRun{ID: i.ID, State: store.RunState(i.State), Transfers: int(i.Transfers), Summary: i.Summary,
		Created: fromNanos(i.Created), Updated: fromNanos(i.Updated), Completed: fromNanos(i.Completed)}
}

type xferItem struct {
	key
	Key       string `dynamodbav:"key"`
	Run       string `dynamodbav:"run"`
	Seq       int64  `dynamodbav:"seq"`
	Kind      string `dynamodbav:"kind"`
	Recipient string `dynamodbav:"recipient"`
	Mint      string `dynamodbav:"mint"`
	Amount    int64  `dynamodbav:"amount"`
	State     string `dynamodbav:"state"`
	Signature string `dynamodbav:"signature"`
	LastValid int64  `dynamodbav:"last_valid_block_height"`
	Attempts  int64  `dynamodbav:"attempts"`
	Reason    string `dynamodbav:"fail_reason"`
	Created   int64  `dynamodbav:"created,omitempty"`
	Updated   int64  `dynamodbav:"updated,omitempty"`
}

func (i xferItem) transfer() store.Transfer {
	return store.Transfer{Key: i.Key, Run: i.Run, Seq: int(i.Seq), Kind: i.Kind, Recipient: i.Recipient, Mint: i.Mint,
		Amount: i.Amount, State: store.TransferState(i.State), Signature: i.Signature,
		LastValidBlockHeight: uint64(i.LastValid), Attempts: int(i.Attempts), Reason: i.Reason,
		Created: fromNanos(i.Created), Updated: fromNanos(i.Updated)}
}

// StartRun implements store.Ledger.
func (s *Store) StartRun(ctx context.Context, r store.KeeperRun) (store.KeeperRun, bool, error) {
	if r.ID == "" {
		return store.KeeperRun{}, false, errors.New("dynamo: start run: empty id")
	}
	fail := func(err error) (store.KeeperRun, bool, error) {
		return store.KeeperRun{}, false, fmt.Errorf("dynamo: start run %s: %w", r.ID, err)
	}
	r.State, r.Transfers, r.Updated = store.RunPlanning, 0, r.Created
	// An open run is in the index's open-runs partition until it is done.
	item, err := marshal(runItem{key: runKey(r.ID), ID: r.ID, State: string(r.State), Summary: r.Summary,
		Created: nanos(r.Created), Updated: nanos(r.Updated), GPK: gOpenRuns, GSK: r.ID})
	if err != nil {
		return fail(err)
	}
	token := callToken()
	item[aToken] = str(token)
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.tableName(), Item: item, ConditionExpression: notExists})
	if err == nil {
		return r, true, nil
	}
	if !isConditionFailed(err) {
		return fail(err)
	}
	var it runItem
	if err := s.get(ctx, runKey(r.ID), &it); err != nil {
		return fail(err)
	}
	if err := s.ownWrite(ctx, runKey(r.ID), token, store.ErrExists); err == nil {
		return it.run(), true, nil // the SDK retried our own create
	}
	return it.run(), false, nil
}

// GetRun implements store.Ledger.
func (s *Store) GetRun(ctx context.Context, id string) (store.KeeperRun, error) {
	var it runItem
	if err := s.get(ctx, runKey(id), &it); err != nil {
		return store.KeeperRun{}, fmt.Errorf("dynamo: get run %s: %w", id, err)
	}
	return it.run(), nil
}

// runState explains a failed condition on a run item from its old image.
func runState(tf *txFailed, i int) error {
	old := tf.old(i)
	if old == nil {
		return store.ErrNotFound
	}
	var it runItem
	if err := unmarshal(old, &it); err != nil {
		return err
	}
	return fmt.Errorf("run is %s: %w", it.State, store.ErrConflict)
}

// runIndex lists a run's index entries in Seq order.
func (s *Store) runIndex(ctx context.Context, run string) ([]key, error) {
	var out []key
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :t)"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK),
		ExpressionAttributeValues: values{":pk": str(pRun + run), ":t": str(sRunIdx)},
		ConsistentRead:            aws.Bool(true),
	}, func(item map[string]types.AttributeValue) error {
		var k key
		if err := unmarshal(item, &k); err != nil {
			return err
		}
		out = append(out, k)
		return nil
	})
	return out, err
}

// indexedKey is the transfer key an index entry names.
func indexedKey(k key) string { return k.SK[len(sRunIdx)+21:] }

// ResetPlan implements store.Ledger, in transactions of up to 49 transfers,
// each conditioned on the run still planning.
func (s *Store) ResetPlan(ctx context.Context, run string) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: reset plan %s: %w", run, err) }
	idx, err := s.runIndex(ctx, run)
	if err != nil {
		return fail(err)
	}
	for { // at least once: the condition checks the run even with no transfers
		n := min(len(idx), store.MaxTransfersPerAdd)
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: runKey(run).av(),
			UpdateExpression:                    aws.String("SET #added = #added - :n"),
			ConditionExpression:                 aws.String("#state = :planning"),
			ExpressionAttributeNames:            names(aAdded, aState),
			ExpressionAttributeValues:           values{":n": num(int64(n)), ":planning": str(string(store.RunPlanning))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		for _, k := range idx[:n] {
			items = append(items,
				types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(), Key: k.av()}},
				types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(), Key: xferKey(indexedKey(k)).av()}})
		}
		err := s.transact(ctx, items)
		var tf *txFailed
		if errors.As(err, &tf) {
			return fail(runState(tf, 0))
		}
		if err != nil {
			return fail(err)
		}
		idx = idx[n:]
		if len(idx) == 0 {
			return nil
		}
	}
}

// AddTransfers implements store.Ledger: the transfers, their index entries
// and the run's count in one transaction.
func (s *Store) AddTransfers(ctx context.Context, run string, ts []store.Transfer, at time.Time) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: add transfers to %s: %w", run, err) }
	if len(ts) > store.MaxTransfersPerAdd {
		return fail(fmt.Errorf("%d transfers in one call, at most %d", len(ts), store.MaxTransfersPerAdd))
	}
	items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: runKey(run).av(),
		UpdateExpression:                    aws.String("SET #added = #added + :n"),
		ConditionExpression:                 aws.String("#state = :planning"),
		ExpressionAttributeNames:            names(aAdded, aState),
		ExpressionAttributeValues:           values{":n": num(int64(len(ts))), ":planning": str(string(store.RunPlanning))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
	for _, t := range ts {
		if t.Key == "" || t.Amount <= 0 || t.Seq < 0 {
			return fail(fmt.Errorf("transfer %q needs a key, a positive amount and a seq", t.Key))
		}
		item, err := marshal(xferItem{key: xferKey(t.Key), Key: t.Key, Run: run, Seq: int64(t.Seq), Kind: t.Kind,
			Recipient: t.Recipient, Mint: t.Mint, Amount: t.Amount, State: string(store.TransferPlanned),
			Created: nanos(at), Updated: nanos(at)})
		if err != nil {
			return fail(err)
		}
		items = append(items,
			types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item, ConditionExpression: notExists}},
			types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: runIdxKey(run, t.Seq, t.Key).av()}})
	}
	err := s.transact(ctx, items)
	var tf *txFailed
	if errors.As(err, &tf) {
		if tf.failed(0) {
			return fail(runState(tf, 0))
		}
		for i := 1; i < len(items); i += 2 {
			if tf.failed(i) {
				return fail(fmt.Errorf("transfer %s: %w", ts[(i-1)/2].Key, store.ErrExists))
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// SealPlan implements store.Ledger.
func (s *Store) SealPlan(ctx context.Context, run string, count int, summary string, at time.Time) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: runKey(run).av(),
		UpdateExpression:                    aws.String("SET #state = :sealed, #transfers = :count, #summary = :summary, #updated = :at"),
		ConditionExpression:                 aws.String("#state = :planning AND #added = :count"),
		ExpressionAttributeNames:            names(aState, aTransfers, aSummary, aUpdated, aAdded),
		ExpressionAttributeValues:           values{":sealed": str(string(store.RunSealed)), ":planning": str(string(store.RunPlanning)), ":count": num(int64(count)), ":summary": str(summary), ":at": num(nanos(at))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		if ccf.Item == nil {
			err = store.ErrNotFound
		} else {
			var it runItem
			if err = unmarshal(ccf.Item, &it); err == nil {
				switch {
				case it.State == string(store.RunSealed) && it.Transfers == int64(count):
					return nil
				case it.State != string(store.RunPlanning):
					err = fmt.Errorf("run is %s: %w", it.State, store.ErrConflict)
				default:
					err = fmt.Errorf("run holds %d transfers, plan has %d: %w", it.Added, count, store.ErrConflict)
				}
			}
		}
	}
	if err != nil {
		return fmt.Errorf("dynamo: seal plan %s: %w", run, err)
	}
	return nil
}

// GetTransfer implements store.Ledger.
func (s *Store) GetTransfer(ctx context.Context, k string) (store.Transfer, error) {
	var it xferItem
	if err := s.get(ctx, xferKey(k), &it); err != nil {
		return store.Transfer{}, fmt.Errorf("dynamo: get transfer %s: %w", k, err)
	}
	return it.transfer(), nil
}

// RunTransfers implements store.Ledger: the run's index, then its
// transfers in batches.
func (s *Store) RunTransfers(ctx context.Context, run string) ([]store.Transfer, error) {
	fail := func(err error) ([]store.Transfer, error) {
		return nil, fmt.Errorf("dynamo: run transfers %s: %w", run, err)
	}
	idx, err := s.runIndex(ctx, run)
	if err != nil {
		return fail(err)
	}
	keys := make([]string, len(idx))
	for i, k := range idx {
		keys[i] = indexedKey(k)
	}
	byKey, err := s.transfers(ctx, keys)
	if err != nil {
		return fail(err)
	}
	var out []store.Transfer
	for _, k := range keys {
		t, ok := byKey[k]
		if !ok {
			return fail(fmt.Errorf("index names missing transfer %q", k))
		}
		out = append(out, t)
	}
	return out, nil
}

// transfers reads transfers by key, consistently, 100 per batch.
func (s *Store) transfers(ctx context.Context, keys []string) (map[string]store.Transfer, error) {
	out := map[string]store.Transfer{}
	for chunk := range slices.Chunk(keys, 100) {
		var req []map[string]types.AttributeValue
		seen := map[string]bool{}
		for _, k := range chunk {
			if !seen[k] {
				seen[k] = true
				req = append(req, xferKey(k).av())
			}
		}
		err := s.batchGet(ctx, req, func(item map[string]types.AttributeValue) error {
			var it xferItem
			if err := unmarshal(item, &it); err != nil {
				return err
			}
			out[it.Key] = it.transfer()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// loadTransfers reads keys that must all exist.
func (s *Store) loadTransfers(ctx context.Context, keys []string) ([]store.Transfer, error) {
	if len(keys) == 0 || len(keys) > maxTransfersPerWrite {
		return nil, fmt.Errorf("%d transfers in one call, 1 to %d", len(keys), maxTransfersPerWrite)
	}
	byKey, err := s.transfers(ctx, keys)
	if err != nil {
		return nil, err
	}
	out := make([]store.Transfer, 0, len(keys))
	for _, k := range keys {
		t, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("transfer %s: %w", k, store.ErrNotFound)
		}
		out = append(out, t)
	}
	return out, nil
}

// MarkSent implements store.Ledger: every transfer conditioned on the state
// it must be in, and each of their runs on being sealed, in one transaction.
func (s *Store) MarkSent(ctx context.Context, keys []string, prev, sig string, lastValid uint64, at time.Time) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: mark sent %s: %w", sig, err) }
	if sig == "" || len(keys) == 0 {
		return fail(errors.New("empty signature or no transfers"))
	}
	ts, err := s.loadTransfers(ctx, keys)
	if err != nil {
		return fail(err)
	}
	runs := map[string]bool{}
	var items []types.TransactWriteItem
	for _, t := range ts {
		runs[t.Run] = true
		cond, v := "#state = :planned", values{":planned": str(string(store.TransferPlanned))}
		if prev != "" {
			cond, v = "#state = :sent AND #signature = :prev", values{":sent": str(string(store.TransferSent)), ":prev": str(prev)}
		}
		v[":newstate"], v[":sig"], v[":lv"], v[":at"], v[":one"] = str(string(store.TransferSent)), str(sig), num(int64(lastValid)), num(nanos(at)), num(1)
		items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: xferKey(t.Key).av(),
			UpdateExpression:          aws.String("SET #state = :newstate, #signature = :sig, #last_valid_block_height = :lv, #updated = :at, #attempts = #attempts + :one"),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  names(aState, aSig, aLastValid, aUpdated, aAttempts),
			ExpressionAttributeValues: v}})
	}
	if len(items)+len(runs) > 100 {
		return fail(fmt.Errorf("%d transfers over %d runs do not fit one transaction", len(items), len(runs)))
	}
	for _, run := range slices.Sorted(maps.Keys(runs)) {
		items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
			Key: runKey(run).av(), ConditionExpression: aws.String("#state = :sealed"),
			ExpressionAttributeNames: names(aState), ExpressionAttributeValues: values{":sealed": str(string(store.RunSealed))}}})
	}
	err = s.transact(ctx, items)
	var tf *txFailed
	if errors.As(err, &tf) {
		for i := range items {
			if !tf.failed(i) {
				continue
			}
			if i >= len(ts) {
				return fail(fmt.Errorf("a run is not sealed: %w", store.ErrConflict))
			}
			return fail(fmt.Errorf("transfer %s is not %s under %q: %w", ts[i].Key, map[bool]string{true: "planned", false: "sent"}[prev == ""], prev, store.ErrConflict))
		}
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// Settle implements store.Ledger. Transfers already in the target state are
// checked, not written, so settling twice changes nothing.
func (s *Store) Settle(ctx context.Context, keys []string, sig string, state store.TransferState, reason string, at time.Time) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: settle %s: %w", sig, err) }
	if state != store.TransferConfirmed && state != store.TransferFailed {
		return fail(fmt.Errorf("%q is not a final state", state))
	}
	ts, err := s.loadTransfers(ctx, keys)
	if err != nil {
		return fail(err)
	}
	var items []types.TransactWriteItem
	for _, t := range ts {
		if t.Signature != sig || (t.State != store.TransferSent && t.State != state) {
			return fail(fmt.Errorf("transfer %s is %s under %q: %w", t.Key, t.State, t.Signature, store.ErrConflict))
		}
		if t.State == state {
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: xferKey(t.Key).av(), ConditionExpression: aws.String("#state = :st AND #signature = :sig"),
				ExpressionAttributeNames:  names(aState, aSig),
				ExpressionAttributeValues: values{":st": str(string(state)), ":sig": str(sig)}}})
			continue
		}
		items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: xferKey(t.Key).av(),
			UpdateExpression:          aws.String("SET #state = :st, #fail_reason = :reason, #updated = :at"),
			ConditionExpression:       aws.String("#state = :sent AND #signature = :sig"),
			ExpressionAttributeNames:  names(aState, aReason, aUpdated, aSig),
			ExpressionAttributeValues: values{":st": str(string(state)), ":reason": str(reason), ":at": num(nanos(at)), ":sent": str(string(store.TransferSent)), ":sig": str(sig)}}})
	}
	err = s.transact(ctx, items)
	var tf *txFailed
	if errors.As(err, &tf) {
		return fail(fmt.Errorf("a transfer changed meanwhile: %w", store.ErrConflict))
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// OpenRuns implements store.Ledger: one query of the index's open-runs
// partition.
func (s *Store) OpenRuns(ctx context.Context, prefix string) ([]store.KeeperRun, error) {
	out := []store.KeeperRun{}
	err := s.query(ctx, &dynamodb.QueryInput{IndexName: aws.String(schema.Index),
		KeyConditionExpression:    aws.String("#gpk = :gpk AND begins_with(#gsk, :prefix)"),
		ExpressionAttributeNames:  names(schema.GPK, schema.GSK),
		ExpressionAttributeValues: values{":gpk": str(gOpenRuns), ":prefix": str(prefix)},
	}, func(item map[string]types.AttributeValue) error {
		var it runItem
		if err := unmarshal(item, &it); err != nil {
			return err
		}
		if r := it.run(); r.State != store.RunDone {
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dynamo: open runs %q: %w", prefix, err)
	}
	return out, nil
}

// RequestPayout implements store.Earnings.
func (s *Store) RequestPayout(ctx context.Context, accountID string, at time.Time) (store.Account, error) {
	fail := func(err error) (store.Account, error) {
		return store.Account{}, fmt.Errorf("dynamo: request payout of %s: %w", accountID, err)
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: accountKey(accountID).av(),
		UpdateExpression: aws.String("SET #payout_requested = if_not_exists(#payout_requested, :at)"), ConditionExpression: exists,
		ExpressionAttributeNames: names(aPayoutReq), ExpressionAttributeValues: values{":at": num(nanos(at))}})
	if isConditionFailed(err) {
		err = fmt.Errorf("account: %w", store.ErrNotFound)
	}
	if err != nil {
		return fail(err)
	}
	a, err := s.GetAccount(ctx, accountID)
	if err != nil {
		return fail(err)
	}
	return a, nil
}

// FinishRun implements store.Ledger: the run's end and its carries in one
// transaction.
func (s *Store) FinishRun(ctx context.Context, run string, carries map[string]int64, at time.Time) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: finish run %s: %w", run, err) }
	if len(carries) > 99 {
		return fail(fmt.Errorf("%d carries, at most 99", len(carries)))
	}
	items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: runKey(run).av(),
		UpdateExpression:                    aws.String("SET #state = :done, #updated = :at, #completed = :at REMOVE #gpk, #gsk"),
		ConditionExpression:                 aws.String("#state = :sealed"),
		ExpressionAttributeNames:            names(aState, aUpdated, aCompleted, schema.GPK, schema.GSK),
		ExpressionAttributeValues:           values{":done": str(string(store.RunDone)), ":sealed": str(string(store.RunSealed)), ":at": num(nanos(at))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
	for _, name := range slices.Sorted(maps.Keys(carries)) {
		item := key{pCarry + name, "CARRY"}.av()
		item[aValue] = num(carries[name])
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item}})
	}
	err := s.transact(ctx, items)
	var tf *txFailed
	if errors.As(err, &tf) {
		if old := tf.old(0); old != nil {
			var it runItem
			if uerr := unmarshal(old, &it); uerr == nil && it.State == string(store.RunDone) {
				return nil // finished already: the carries were written then
			}
		}
		return fail(runState(tf, 0))
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// Carry implements store.Ledger.
func (s *Store) Carry(ctx context.Context, name string) (int64, error) {
	var it struct {
		Value int64 `dynamodbav:"value"`
	}
	err := s.get(ctx, key{pCarry + name, "CARRY"}, &it)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("dynamo: carry %s: %w", name, err)
	}
	return it.Value, nil
}

// SetDailyAllowance implements store.Ledger: the (account, day) item, the
// allowance and its ledger entry in one transaction.
func (s *Store) SetDailyAllowance(ctx context.Context, accountID, day string, credits int64) (bool, error) {
	if accountID == "" || day == "" || credits < 0 {
		return false, fmt.Errorf("dynamo: set allowance: account %q, day %q, credits %d", accountID, day, credits)
	}
	items := s.withEntry([]types.TransactWriteItem{
		{Put: &types.Put{TableName: s.tableName(), Item: key{pAllow + accountID + "#" + day, "ALLOW"}.av(), ConditionExpression: notExists}},
		{Update: &types.Update{TableName: s.tableName(), Key: accountKey(accountID).av(),
			UpdateExpression: aws.String("SET #allowance = :c, #allowance_day = :d"), ConditionExpression: exists,
			ExpressionAttributeNames:  names(aAllowance, aAllowDay),
			ExpressionAttributeValues: values{":c": num(credits), ":d": str(day)}}},
	}, store.AllowanceEntry(accountID, day, credits, s.now()))
	if credits > 0 {
		// Listed under its day, for the next day's reset.
		item := key{pAllowDay + day, sAccount + "#" + accountID}.av()
		item[aAccount] = str(accountID)
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item}})
	}
	err := s.transact(ctx, items)
	var tf *txFailed
	switch {
	case errors.As(err, &tf) && tf.failed(0):
		return false, nil
	case errors.As(err, &tf) && tf.failed(1):
		err = fmt.Errorf("account: %w", store.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("dynamo: set allowance of %s for %s: %w", accountID, day, err)
	}
	s.hints.setAllowance(accountID, credits)
	return true, nil
}

// AllowanceAccounts implements store.Ledger: one query of the day's list.
func (s *Store) AllowanceAccounts(ctx context.Context, day string) ([]string, error) {
	out, err := s.listedAccounts(ctx, pAllowDay+day)
	if err != nil {
		return nil, fmt.Errorf("dynamo: allowance accounts of %s: %w", day, err)
	}
	return out, nil
}

var _ store.Earnings = (*Store)(nil)

// OwedEarnings implements store.Earnings: the accounts in the index's
// earnings partitions, each then read whole (GetAccount sums its shards).
func (s *Store) OwedEarnings(ctx context.Context, minimum int64) ([]store.Owed, error) {
	fail := func(err error) ([]store.Owed, error) { return nil, fmt.Errorf("dynamo: owed earnings: %w", err) }
	if minimum < 1 {
		return fail(fmt.Errorf("minimum %d, want at least 1", minimum))
	}
	accounts := map[string]bool{}
	for i := range earnShards {
		err := s.query(ctx, &dynamodb.QueryInput{IndexName: aws.String(schema.Index),
			KeyConditionExpression:    aws.String("#gpk = :gpk"),
			ExpressionAttributeNames:  names(schema.GPK),
			ExpressionAttributeValues: values{":gpk": str(fmt.Sprintf("%s%d", gEarn, i))},
		}, func(item map[string]types.AttributeValue) error {
			var k key
			if err := unmarshal(item, &k); err != nil {
				return err
			}
			accounts[k.PK[len(pAccount):]] = true
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	var out []store.Owed
	for _, id := range slices.Sorted(maps.Keys(accounts)) {
		a, err := s.GetAccount(ctx, id)
		if err != nil {
			return fail(err)
		}
		if owed := a.Earned - a.PaidOut; owed >= minimum {
			out = append(out, store.Owed{AccountID: a.ID, Wallet: a.Wallet, Credits: owed, Requested: !a.PayoutRequested.IsZero()})
		}
	}
	return out, nil
}

// AdjustPaidOut implements store.Earnings: the idempotency item, the
// account's PaidOut and its ledger entry in one transaction, conditioned on
// the PaidOut read with the earnings (which only grow), so the bound check
// holds.
func (s *Store) AdjustPaidOut(ctx context.Context, accountID string, delta int64, idem string) (bool, error) {
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("dynamo: adjust paid out of %s by %d (%s): %w", accountID, delta, idem, err)
	}
	if idem == "" || delta == 0 {
		return fail(errors.New("empty key or zero delta"))
	}
	mark := key{"PAYOUT#" + idem, "PAYOUT"}
	entry := store.PayoutEntry(accountID, delta, idem, s.now())
	for try := 0; ; try++ {
		if err := s.get(ctx, mark, &struct{}{}); err == nil {
			return false, nil // the key was used
		} else if !errors.Is(err, store.ErrNotFound) {
			return fail(err)
		}
		a, err := s.GetAccount(ctx, accountID)
		if err != nil {
			return fail(err)
		}
		if p := a.PaidOut + delta; p < 0 || p > a.Earned {
			return fail(fmt.Errorf("paid out %d%+d against earned %d: %w", a.PaidOut, delta, a.Earned, store.ErrInsufficientCredits))
		}
		err = s.transact(ctx, s.withMoney(s.withEntry([]types.TransactWriteItem{
			{Put: &types.Put{TableName: s.tableName(), Item: mark.av(), ConditionExpression: notExists}},
			{Update: &types.Update{TableName: s.tableName(), Key: accountKey(accountID).av(),
				// An account item written before PaidOut existed has no
				// attribute: it counts as 0.
				UpdateExpression:          aws.String(paidOutUpdate(delta)),
				ConditionExpression:       aws.String(paidOutIs(a.PaidOut)),
				ExpressionAttributeNames:  paidOutNames(delta),
				ExpressionAttributeValues: values{":d": num(delta), ":old": num(a.PaidOut), ":zero": num(0)}}},
		}, entry), idem, store.Money{PaidOut: delta}))
		var tf *txFailed
		switch {
		case err == nil:
			return true, nil
		case errors.As(err, &tf) && tf.failed(0):
			return false, nil
		case errors.As(err, &tf) && tf.failed(1) && try < maxStaleRetries:
			continue // paid out moved meanwhile: read again
		}
		return fail(err)
	}
}

// paidOutUpdate is AdjustPaidOut's update: a reservation (delta > 0)
// also answers the owner's request for a payout.
func paidOutUpdate(delta int64) string {
	if delta > 0 {
		return "SET #paid_out = if_not_exists(#paid_out, :zero) + :d REMOVE #payout_requested"
	}
	return "SET #paid_out = if_not_exists(#paid_out, :zero) + :d"
}

func paidOutNames(delta int64) map[string]string {
	if delta > 0 {
		return names(aPaidOut, aPayoutReq)
	}
	return names(aPaidOut)
}

// paidOutIs is the condition that PaidOut still is old.
func paidOutIs(old int64) string {
	if old == 0 {
		return "attribute_exists(pk) AND (attribute_not_exists(#paid_out) OR #paid_out = :old)"
	}
	return "#paid_out = :old"
}
