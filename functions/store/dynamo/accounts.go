package dynamo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// notExists is the condition of a put that must create its item.
var notExists = aws.String("attribute_not_exists(" + schema.PK + ")")

// exists is the condition of an update that must not create its item.
var exists = aws.String("attribute_exists(" + schema.PK + ")")

// CreateAccount implements store.Store. The item carries a random token of
// this call, so that when the SDK retries a create whose reply was lost
// and the retry finds the account, the store can tell its own write from
// someone else's.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	if a.ID == "" {
		return errors.New("dynamo: create account: empty id")
	}
	item, err := marshal(toAccountItem(a))
	if err == nil {
		token := callToken()
		item[aToken] = str(token)
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.tableName(), Item: item, ConditionExpression: notExists})
		if isConditionFailed(err) {
			err = s.ownWrite(ctx, accountKey(a.ID), token, store.ErrExists)
		}
	}
	if err != nil {
		return fmt.Errorf("dynamo: create account %s: %w", a.ID, err)
	}
	s.hints.setAllowance(a.ID, a.FreeAllowanceLeft)
	return nil
}

// aToken is the attribute holding the token of the call that wrote an item.
const aToken = "call_token"

// callToken is a random token for one call's write.
func callToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ownWrite decides a failed "must not exist" condition: nil if the item
// holds this call's token (an SDK retry of our own write, whose first reply
// was lost), else taken.
func (s *Store) ownWrite(ctx context.Context, k key, token string, taken error) error {
	var it struct {
		Token string `dynamodbav:"call_token"`
	}
	if err := s.get(ctx, k, &it); err != nil {
		return err
	}
	if it.Token == token {
		return nil
	}
	return taken
}

// paidToKey is an account's item under a payout wallet it proved.
func paidToKey(wallet, account string) key { return key{pPaidTo + wallet, sAccount + "#" + account} }

// SetWallet implements store.Store: the account's wallet, conditioned on
// the one read, moves with its item under the wallet in one transaction.
func (s *Store) SetWallet(ctx context.Context, accountID, wallet string) (store.Account, error) {
	fail := func(err error) (store.Account, error) {
		return store.Account{}, fmt.Errorf("dynamo: set wallet of %s: %w", accountID, err)
	}
	for try := 0; ; try++ {
		a, err := s.GetAccount(ctx, accountID)
		if err != nil {
			return fail(err)
		}
		cond, v := "attribute_exists(pk) AND attribute_not_exists(#wallet)", values{":w": str(wallet)}
		if a.Wallet != "" {
			cond, v[":old"] = "#wallet = :old", str(a.Wallet)
		}
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: accountKey(accountID).av(),
			UpdateExpression: aws.String("SET #wallet = :w"), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names(aWallet), ExpressionAttributeValues: v}}}
		if a.Wallet != "" && a.Wallet != wallet {
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(), Key: paidToKey(a.Wallet, accountID).av()}})
		}
		item := paidToKey(wallet, accountID).av()
		item[aAccount] = str(accountID)
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item}})
		err = s.transact(ctx, items)
		var tf *txFailed
		switch {
		case err == nil:
			a.Wallet = wallet
			return a, nil
		case errors.As(err, &tf) && tf.failed(0) && try < maxStaleRetries:
			continue // the wallet changed meanwhile: read again
		}
		return fail(err)
	}
}

// AccountsPaidTo implements store.Store: the account whose id is the wallet
// (a sign-in's, paid to itself unless it proved another) and those under
// the wallet's items, each read back to check it still pays there.
func (s *Store) AccountsPaidTo(ctx context.Context, wallet string) ([]store.Account, error) {
	fail := func(err error) ([]store.Account, error) {
		return nil, fmt.Errorf("dynamo: accounts paid to %s: %w", wallet, err)
	}
	listed, err := s.listedAccounts(ctx, pPaidTo+wallet)
	if err != nil {
		return fail(err)
	}
	ids := append(listed, wallet)
	slices.Sort(ids)
	var out []store.Account
	for _, id := range slices.Compact(ids) {
		a, err := s.GetAccount(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return fail(err)
		}
		if a.Wallet == wallet {
			out = append(out, a)
		}
	}
	return out, nil
}

// listedAccounts reads a partition of items that each name an account (its
// "account" attribute): the accounts under a payout wallet, or given a
// day's allowance.
func (s *Store) listedAccounts(ctx context.Context, pk string) ([]string, error) {
	out := []string{}
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk"),
		ExpressionAttributeNames:  names(schema.PK),
		ExpressionAttributeValues: values{":pk": str(pk)},
		ConsistentRead:            aws.Bool(true),
	}, func(item map[string]types.AttributeValue) error {
		var it struct {
			Account string `dynamodbav:"account"`
		}
		if err := unmarshal(item, &it); err != nil {
			return err
		}
		out = append(out, it.Account)
		return nil
	})
	return out, err
}

// SetStakeBoost implements store.Store.
func (s *Store) SetStakeBoost(ctx context.Context, accountID string, until time.Time) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: accountKey(accountID).av(),
		UpdateExpression: aws.String("SET #boost_until = :u"), ConditionExpression: exists,
		ExpressionAttributeNames: names("boost_until"), ExpressionAttributeValues: values{":u": num(nanos(until))}})
	if isConditionFailed(err) {
		err = fmt.Errorf("account: %w", store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("dynamo: set stake boost of %s: %w", accountID, err)
	}
	return nil
}

// GetAccount implements store.Store: one query returns the account and the
// shards of its earnings (sort keys ACCT and EARN#…, adjacent in order).
func (s *Store) GetAccount(ctx context.Context, id string) (store.Account, error) {
	var it accountItem
	found := false
	var earned int64
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND #sk BETWEEN :from AND :to"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK),
		ExpressionAttributeValues: values{":pk": str(pAccount + id), ":from": str(sAccount), ":to": str(sEarn + "~")},
		ConsistentRead:            aws.Bool(true),
	}, func(item map[string]types.AttributeValue) error {
		var k key
		if err := unmarshal(item, &k); err != nil {
			return err
		}
		switch {
		case k.SK == sAccount:
			found = true
			return unmarshal(item, &it)
		case strings.HasPrefix(k.SK, sEarn):
			var e struct {
				Earned int64 `dynamodbav:"earned"`
			}
			if err := unmarshal(item, &e); err != nil {
				return err
			}
			earned += e.Earned
		}
		return nil
	})
	if err == nil && !found {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Account{}, fmt.Errorf("dynamo: get account %s: %w", id, err)
	}
	a := it.account()
	a.Earned += earned
	s.hints.setAllowance(id, a.FreeAllowanceLeft)
	return a, nil
}

// get reads one item with a strongly consistent read into v;
// store.ErrNotFound if it does not exist.
func (s *Store) get(ctx context.Context, k key, v any) error {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.tableName(), Key: k.av(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return err
	}
	if out.Item == nil {
		return store.ErrNotFound
	}
	return unmarshal(out.Item, v)
}

// Grant implements store.Store: the grant record (the idempotency key, kept
// forever), the balance change and its ledger entry are one transaction.
func (s *Store) Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error) {
	if idemKey == "" {
		return false, fmt.Errorf("dynamo: grant to %s: empty idempotency key", accountID)
	}
	if credits < 0 {
		return false, fmt.Errorf("dynamo: grant to %s: negative credits %d", accountID, credits)
	}
	entry := store.GrantEntry(accountID, credits, idemKey, deposit, s.now())
	err := s.transact(ctx, s.withGrantMoney(s.withEntry(s.grantItems(entry), entry), entry))
	var tf *txFailed
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &tf) && tf.failed(0):
		return false, nil // the key was used: the first grant stands
	case errors.As(err, &tf) && tf.failed(1):
		err = fmt.Errorf("account: %w", store.ErrNotFound)
	}
	return false, fmt.Errorf("dynamo: grant %d to %s (%s): %w", credits, accountID, idemKey, err)
}

// withGrantMoney appends the money totals' update of a grant or deposit
// whose entry is e.
func (s *Store) withGrantMoney(items []types.TransactWriteItem, e store.Entry) []types.TransactWriteItem {
	m := store.Money{Granted: e.Credits}
	if e.Kind == store.EntryDeposit {
		m = store.Money{Deposited: e.Credits}
	}
	return s.withMoney(items, e.Ref, m)
}

// grantItems are the first two items of the transaction of a grant (or a
// deposit) whose entry is e (GrantEntry's): the put of the grant record
// under its idempotency key e.Ref, which must be new, and the account's
// credit, which must find the account. The caller adds the entry
// (withEntry).
func (s *Store) grantItems(e store.Entry) []types.TransactWriteItem {
	deposit := e.Kind == store.EntryDeposit
	rec := grantKey(e.Ref).av()
	rec[aAccount] = str(e.AccountID)
	rec[aCredits] = num(e.Credits)
	rec["deposit"] = boolean(deposit)
	update, attrs := "SET #credits = #credits + :c", names(aCredits)
	if deposit {
		update, attrs = update+", #deposited = #deposited + :c", names(aCredits, aDeposited)
	}
	return []types.TransactWriteItem{
		{Put: &types.Put{TableName: s.tableName(), Item: rec, ConditionExpression: notExists}},
		{Update: &types.Update{TableName: s.tableName(), Key: accountKey(e.AccountID).av(),
			UpdateExpression: aws.String(update), ConditionExpression: exists,
			ExpressionAttributeNames:  attrs,
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": num(e.Credits)}}},
	}
}
