package dynamo

import (
	"context"
	"errors"
	"fmt"

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

// CreateAccount implements store.Store.
func (s *Store) CreateAccount(ctx context.Context, a store.Account) error {
	if a.ID == "" {
		return errors.New("dynamo: create account: empty id")
	}
	item, err := marshal(toAccountItem(a))
	if err == nil {
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.tableName(), Item: item, ConditionExpression: notExists})
		if isConditionFailed(err) {
			err = store.ErrExists
		}
	}
	if err != nil {
		return fmt.Errorf("dynamo: create account %s: %w", a.ID, err)
	}
	s.hints.setAllowance(a.ID, a.FreeAllowanceLeft)
	return nil
}

// GetAccount implements store.Store.
func (s *Store) GetAccount(ctx context.Context, id string) (store.Account, error) {
	var it accountItem
	if err := s.get(ctx, accountKey(id), &it); err != nil {
		return store.Account{}, fmt.Errorf("dynamo: get account %s: %w", id, err)
	}
	a := it.account()
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
// forever) and the balance change are one transaction.
func (s *Store) Grant(ctx context.Context, accountID string, credits int64, idemKey string, deposit bool) (bool, error) {
	if idemKey == "" {
		return false, fmt.Errorf("dynamo: grant to %s: empty idempotency key", accountID)
	}
	if credits < 0 {
		return false, fmt.Errorf("dynamo: grant to %s: negative credits %d", accountID, credits)
	}
	rec := grantKey(idemKey).av()
	rec[aAccount] = str(accountID)
	rec[aCredits] = num(credits)
	rec["deposit"] = boolean(deposit)
	update, attrs := "SET #credits = #credits + :c", names(aCredits)
	if deposit {
		update, attrs = update+", #deposited = #deposited + :c", names(aCredits, aDeposited)
	}
	err := s.transact(ctx, []types.TransactWriteItem{
		{Put: &types.Put{TableName: s.tableName(), Item: rec, ConditionExpression: notExists}},
		{Update: &types.Update{TableName: s.tableName(), Key: accountKey(accountID).av(),
			UpdateExpression: aws.String(update), ConditionExpression: exists,
			ExpressionAttributeNames:  attrs,
			ExpressionAttributeValues: map[string]types.AttributeValue{":c": num(credits)}}},
	})
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
