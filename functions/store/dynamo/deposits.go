package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// depositShards spreads the index entries of deposit intents, which
// OpenDeposits reads from a time on: each partition is sorted by Created.
// Intents are made by people paying, a low write rate; the shards keep
// the sweep's reads parallel.
const depositShards = 4

// Attribute names of a deposit intent.
const (
	aCreditedUSDC = "credited_usdc"
	aSignatures   = "signatures"
)

// depositItem is a deposit intent, in its account's partition, and in the
// index's deposit partitions (for OpenDeposits: every account's, by time).
// CreditDeposit changes it by adding to its totals and appending to its
// signatures, so that concurrent credits add up.
type depositItem struct {
	key
	GPK          string `dynamodbav:"gpk"`
	GSK          string `dynamodbav:"gsk"`
	ID           string `dynamodbav:"id"`
	Account      string `dynamodbav:"account"`
	Kind         string `dynamodbav:"kind,omitempty"`
	Reference    string `dynamodbav:"reference"`
	AmountUSDC   int64  `dynamodbav:"amount_usdc,omitempty"`
	State        string `dynamodbav:"state"`
	CreditedUSDC int64  `dynamodbav:"credited_usdc"`
	Credits      int64  `dynamodbav:"credits"`
	// Signatures is a list, never NULL (an empty one when none), so
	// that list_append and size work on it.
	Signatures []string `dynamodbav:"signatures"`
	Created    int64    `dynamodbav:"created"`
	Updated    int64    `dynamodbav:"updated,omitempty"`
}

// depositKey is an intent's key in its account's partition.
func depositKey(account, id string) key { return key{pAccount + account, sDeposit + id} }

// depositAtKey is the item that lists an intent in its account's
// partition by Created (its only attribute is the intent's id).
func depositAtKey(d store.Deposit) key {
	return key{pAccount + d.AccountID, sDepositAt + timeKey(d.Created) + "#" + d.ID}
}

// depositRefKey is the item that takes a reference for one intent.
func depositRefKey(reference string) key { return key{pDepRef + reference, "DEPREF"} }

// depositIndex is an intent's index partition and sort key: by Created,
// then account and id.
func depositIndex(d store.Deposit) (gpk, gsk string) {
	return depositPartition(shard(d.AccountID+"#"+d.ID, depositShards)), timeKey(d.Created) + "#" + d.AccountID + "#" + d.ID
}

func depositPartition(i int) string { return fmt.Sprintf("%s%d", gDep, i) }

func toDepositItem(d store.Deposit) depositItem {
	sigs := d.Signatures
	if sigs == nil {
		sigs = []string{}
	}
	i := depositItem{key: depositKey(d.AccountID, d.ID), ID: d.ID, Account: d.AccountID, Kind: string(d.Kind), Reference: d.Reference,
		AmountUSDC: d.AmountUSDC, State: string(d.State), CreditedUSDC: d.CreditedUSDC, Credits: d.Credits,
		Signatures: sigs, Created: nanos(d.Created), Updated: nanos(d.Updated)}
	i.GPK, i.GSK = depositIndex(d)
	return i
}

func (i depositItem) deposit() store.Deposit {
	var sigs []string
	if len(i.Signatures) > 0 {
		sigs = i.Signatures
	}
	return store.Deposit{ID: i.ID, AccountID: i.Account, Kind: store.DepositKind(i.Kind), Reference: i.Reference, AmountUSDC: i.AmountUSDC,
		State: store.DepositState(i.State), CreditedUSDC: i.CreditedUSDC, Credits: i.Credits, Signatures: sigs,
		Created: fromNanos(i.Created), Updated: fromNanos(i.Updated)}
}

func decodeDeposit(item map[string]types.AttributeValue) (store.Deposit, error) {
	var it depositItem
	err := unmarshal(item, &it)
	return it.deposit(), err
}

// PutDeposit implements store.Deposits: one transaction puts the intent,
// the reference's item and the account's time-ordered item, each of which
// must be new.
func (s *Store) PutDeposit(ctx context.Context, d store.Deposit) error {
	fail := func(err error) error { return fmt.Errorf("dynamo: put deposit %s of %s: %w", d.ID, d.AccountID, err) }
	d, err := d.Fresh()
	if err != nil {
		return fail(err)
	}
	intent, err := marshal(toDepositItem(d))
	if err != nil {
		return fail(err)
	}
	ref := depositRefKey(d.Reference).av()
	ref[aAccount], ref["id"] = str(d.AccountID), str(d.ID)
	listed := depositAtKey(d).av()
	listed["id"] = str(d.ID)
	put := func(item map[string]types.AttributeValue) types.TransactWriteItem {
		return types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item, ConditionExpression: notExists}}
	}
	err = s.transact(ctx, []types.TransactWriteItem{put(intent), put(ref), put(listed)})
	var tf *txFailed
	switch {
	case errors.As(err, &tf) && tf.failed(0):
		err = fmt.Errorf("id: %w", store.ErrExists)
	case errors.As(err, &tf) && tf.failed(1):
		err = fmt.Errorf("reference %s: %w", d.Reference, store.ErrExists)
	case errors.As(err, &tf):
		err = fmt.Errorf("%w: %w", err, store.ErrExists)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// GetDeposit implements store.Deposits.
func (s *Store) GetDeposit(ctx context.Context, accountID, id string) (store.Deposit, error) {
	var it depositItem
	if err := s.get(ctx, depositKey(accountID, id), &it); err != nil {
		return store.Deposit{}, fmt.Errorf("dynamo: get deposit %s of %s: %w", id, accountID, err)
	}
	return it.deposit(), nil
}

// ListDeposits implements store.Deposits: a query of the account's
// time-ordered items, newest first, then the intents, 100 a batch.
func (s *Store) ListDeposits(ctx context.Context, accountID string, limit int) ([]store.Deposit, error) {
	fail := func(err error) ([]store.Deposit, error) {
		return nil, fmt.Errorf("dynamo: list deposits of %s: %w", accountID, err)
	}
	if err := store.CheckDepositsLimit(limit); err != nil {
		return fail(err)
	}
	var ids []string
	err := s.queryUpTo(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK),
		ExpressionAttributeValues: values{":pk": str(pAccount + accountID), ":prefix": str(sDepositAt)},
		ScanIndexForward:          aws.Bool(false),
		ConsistentRead:            aws.Bool(true),
	}, limit, func(item map[string]types.AttributeValue) error {
		var it struct {
			ID string `dynamodbav:"id"`
		}
		err := unmarshal(item, &it)
		ids = append(ids, it.ID)
		return err
	})
	if err != nil {
		return fail(err)
	}
	out, err := batchGetListed(ctx, s, "deposit intent", ids, func(id string) key { return depositKey(accountID, id) },
		func(item map[string]types.AttributeValue) (string, store.Deposit, error) {
			d, err := decodeDeposit(item)
			return d.ID, d, err
		})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// OpenDeposits implements store.Deposits: the index's deposit partitions,
// each from since on, merged. The index is eventually consistent, so an
// intent made a moment ago may be missing, and one credited a moment ago
// may show its totals before: the sweep that reads it finds the intent
// in its next round, and credits by signature, once.
func (s *Store) OpenDeposits(ctx context.Context, since time.Time, limit int) ([]store.Deposit, error) {
	fail := func(err error) ([]store.Deposit, error) {
		return nil, fmt.Errorf("dynamo: open deposits since %v: %w", since, err)
	}
	if err := store.CheckDepositsLimit(limit); err != nil {
		return fail(err)
	}
	parts := make([]string, depositShards)
	for i := range parts {
		parts[i] = depositPartition(i)
	}
	out, err := firstOfShards(ctx, s, parts, timeKey(since), limit, decodeDeposit)
	if err != nil {
		return fail(err)
	}
	return out[:min(len(out), limit)], nil
}

// CreditDeposit implements store.Deposits with one transaction: Grant's
// items for key DepositKey(signature) (the grant record, which must be
// new, and the account's credit), the intent's change (which must find the
// intent with fewer than MaxDepositSignatures signatures: it adds to its
// totals and appends the signature, so concurrent credits of other
// signatures add up, as the transaction retries on conflicts) and the
// deposit's ledger entry. Then it reads the intent back, as a transaction
// returns nothing.
func (s *Store) CreditDeposit(ctx context.Context, c store.DepositCredit) (store.Deposit, bool, error) {
	fail := func(err error) (store.Deposit, bool, error) {
		return store.Deposit{}, false, fmt.Errorf("dynamo: credit deposit %s of %s (%s): %w", c.DepositID, c.AccountID, c.Signature, err)
	}
	if err := c.Check(); err != nil {
		return fail(err)
	}
	entry := c.Entry()
	items := append(s.grantItems(entry), types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key: depositKey(c.AccountID, c.DepositID).av(),
		UpdateExpression: aws.String("SET #state = :credited, #credited_usdc = #credited_usdc + :usdc, " +
			"#credits = #credits + :c, #signatures = list_append(#signatures, :sig), #updated = :at"),
		ConditionExpression:      aws.String("attribute_exists(pk) AND size(#signatures) < :max"),
		ExpressionAttributeNames: names(aState, aCreditedUSDC, aCredits, aSignatures, aUpdated),
		ExpressionAttributeValues: values{":credited": str(string(store.DepositCredited)), ":usdc": num(c.USDC),
			":c": num(c.Credits), ":sig": &types.AttributeValueMemberL{Value: []types.AttributeValue{str(c.Signature)}},
			":at": num(nanos(c.At)), ":max": num(store.MaxDepositSignatures)},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}})
	const grantItem, accountItem, intentItem = 0, 1, 2
	err := s.transact(ctx, s.withGrantMoney(s.withEntry(items, entry), entry))
	var tf *txFailed
	switch {
	case err == nil || errors.As(err, &tf) && tf.failed(grantItem):
		// Applied now, or the signature was credited before (then the
		// intent, if it exists, is as that left it).
		var it depositItem
		if err := s.get(ctx, depositKey(c.AccountID, c.DepositID), &it); err != nil {
			return fail(fmt.Errorf("deposit intent: %w", err))
		}
		return it.deposit(), err == nil, nil
	case errors.As(err, &tf) && tf.failed(intentItem) && tf.old(intentItem) == nil:
		err = fmt.Errorf("deposit intent: %w", store.ErrNotFound)
	case errors.As(err, &tf) && tf.failed(intentItem):
		err = fmt.Errorf("%d transfers: %w", store.MaxDepositSignatures, store.ErrLimit)
	case errors.As(err, &tf) && tf.failed(accountItem):
		err = fmt.Errorf("account: %w", store.ErrNotFound)
	}
	return fail(err)
}
