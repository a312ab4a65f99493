package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// secretKind is one namespace of secrets: API keys or worker tokens.
type secretKind struct {
	name   string
	prefix string // partition prefix of the hash item, sort prefix in the account
	// workers says revoking finds the live worker connections.
	workers bool
}

var (
	apiKeys      = secretKind{name: "api key", prefix: "KEY#"}
	workerTokens = secretKind{name: "worker token", prefix: "TOKEN#", workers: true}
)

func (k secretKind) hashKey(hash string) key { return key{k.prefix + hash, "SECRET"} }

func (k secretKind) indexKey(s store.Secret) key {
	return key{pAccount + s.AccountID, k.prefix + timeKey(s.CreatedAt) + "#" + s.Hash}
}

func (k secretKind) countKey(account string) key {
	return key{pAccount + account, sKeyCount + k.prefix}
}

// PutAPIKey implements store.Store.
func (s *Store) PutAPIKey(ctx context.Context, sec store.Secret) error {
	return s.putSecret(ctx, apiKeys, sec)
}

// GetAPIKey implements store.Store.
func (s *Store) GetAPIKey(ctx context.Context, hash string) (store.Secret, error) {
	return s.getSecret(ctx, apiKeys, hash)
}

// ListAPIKeys implements store.Store.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]store.Secret, error) {
	return s.listSecrets(ctx, apiKeys, accountID)
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, accountID, id string, at time.Time) error {
	_, err := s.revokeSecret(ctx, apiKeys, accountID, id, at)
	return err
}

// PutWorkerToken implements store.Store.
func (s *Store) PutWorkerToken(ctx context.Context, sec store.Secret) error {
	return s.putSecret(ctx, workerTokens, sec)
}

// GetWorkerToken implements store.Store.
func (s *Store) GetWorkerToken(ctx context.Context, hash string) (store.Secret, error) {
	return s.getSecret(ctx, workerTokens, hash)
}

// ListWorkerTokens implements store.Store.
func (s *Store) ListWorkerTokens(ctx context.Context, accountID string) ([]store.Secret, error) {
	return s.listSecrets(ctx, workerTokens, accountID)
}

// RevokeWorkerToken implements store.Store. Like the embedded store it
// returns the live connections even when the token was already revoked.
func (s *Store) RevokeWorkerToken(ctx context.Context, accountID, id string, at time.Time) ([]string, error) {
	return s.revokeSecret(ctx, workerTokens, accountID, id, at)
}

// putSecret writes the hash item, the account's index item and, for an
// active secret, the account's active count (capped at MaxActiveKeys) in
// one transaction.
func (s *Store) putSecret(ctx context.Context, kind secretKind, sec store.Secret) error {
	if sec.Hash == "" || sec.AccountID == "" {
		return fmt.Errorf("dynamo: put %s: empty hash or account", kind.name)
	}
	sec, err := sec.Fresh(!kind.workers)
	if err != nil {
		return fmt.Errorf("dynamo: put %s %s for %s: %w", kind.name, sec.ID, sec.AccountID, err)
	}
	byHash, err := marshal(toSecretItem(kind.hashKey(sec.Hash), sec))
	if err != nil {
		return err
	}
	// The account's item lists the secret: its name and controls are
	// the hash item's alone.
	inAccount, err := marshal(toSecretItem(kind.indexKey(sec), store.Secret{Hash: sec.Hash, ID: sec.ID,
		AccountID: sec.AccountID, CreatedAt: sec.CreatedAt, RevokedAt: sec.RevokedAt}))
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: s.tableName(), Item: byHash, ConditionExpression: notExists}},
		{Put: &types.Put{TableName: s.tableName(), Item: inAccount}},
	}
	if sec.Active() {
		items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
			Key:                                 kind.countKey(sec.AccountID).av(),
			UpdateExpression:                    aws.String("SET #active = if_not_exists(#active, :zero) + :one"),
			ConditionExpression:                 aws.String("attribute_not_exists(#active) OR #active < :max"),
			ExpressionAttributeNames:            names(aActive),
			ExpressionAttributeValues:           map[string]types.AttributeValue{":zero": num(0), ":one": num(1), ":max": num(store.MaxActiveKeys)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
	}
	err = s.transact(ctx, items)
	var tf *txFailed
	switch {
	case errors.As(err, &tf) && tf.failed(0):
		err = store.ErrExists
	case errors.As(err, &tf) && tf.failed(2):
		var c struct {
			Active int64 `dynamodbav:"active"`
		}
		_ = unmarshal(tf.old(2), &c) // for the message only
		err = fmt.Errorf("%d active: %w", c.Active, store.ErrLimit)
	}
	if err != nil {
		return fmt.Errorf("dynamo: put %s %s for %s: %w", kind.name, sec.ID, sec.AccountID, err)
	}
	s.learn(kind, toSecretItem(key{}, sec))
	return nil
}

// learn remembers what a key's item says of its spending.
func (s *Store) learn(kind secretKind, it secretItem) {
	if kind == apiKeys {
		s.hints.setKey(it.Hash, spendOf(it))
	}
}

func (s *Store) getSecret(ctx context.Context, kind secretKind, hash string) (store.Secret, error) {
	var it secretItem
	if err := s.get(ctx, kind.hashKey(hash), &it); err != nil {
		return store.Secret{}, fmt.Errorf("dynamo: get %s: %w", kind.name, err)
	}
	s.learn(kind, it)
	return it.secret(), nil
}

// listSecrets lists the account's secrets from its partition, oldest
// first, and reads each from its hash item, the record.
func (s *Store) listSecrets(ctx context.Context, kind secretKind, accountID string) ([]store.Secret, error) {
	fail := func(err error) ([]store.Secret, error) {
		return nil, fmt.Errorf("dynamo: list %ss of %s: %w", kind.name, accountID, err)
	}
	var hashes []string
	err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pAccount + accountID), ":prefix": str(kind.prefix)},
		ConsistentRead:            aws.Bool(true),
	}, func(item map[string]types.AttributeValue) error {
		var it secretItem
		if err := unmarshal(item, &it); err != nil {
			return err
		}
		hashes = append(hashes, it.Hash)
		return nil
	})
	if err != nil {
		return fail(err)
	}
	items, err := batchGetListed(ctx, s, kind.name, hashes, kind.hashKey, func(item map[string]types.AttributeValue) (string, secretItem, error) {
		var it secretItem
		err := unmarshal(item, &it)
		return it.Hash, it, err
	})
	if err != nil {
		return fail(err)
	}
	out := make([]store.Secret, 0, len(items))
	for _, it := range items {
		s.learn(kind, it)
		out = append(out, it.secret())
	}
	return out, nil
}

// UpdateAPIKey implements store.Store.
func (s *Store) UpdateAPIKey(ctx context.Context, accountID, id string, p store.KeyPatch) (store.Secret, error) {
	if err := p.Check(); err != nil {
		return store.Secret{}, fmt.Errorf("dynamo: update api key %s of %s: %w", id, accountID, err)
	}
	e := newExprs()
	var set, remove []string
	field := func(a string, v types.AttributeValue, zero bool) {
		if zero {
			remove = append(remove, e.n(a)) // zero values are not stored
		} else {
			set = append(set, e.n(a)+" = "+e.v(":"+a, v))
		}
	}
	if p.Name != nil {
		field(aName, str(*p.Name), *p.Name == "")
	}
	if p.Limit != nil {
		field(aLimit, num(*p.Limit), *p.Limit == 0)
	}
	if p.LimitReset != nil {
		field(aReset, str(*p.LimitReset), *p.LimitReset == "")
	}
	if p.ExpiresAt != nil {
		field(aExpiresAt, num(nanos(*p.ExpiresAt)), p.ExpiresAt.IsZero())
	}
	return s.updateSecret(ctx, apiKeys, accountID, id, e, set, remove)
}

// RenameWorkerToken implements store.Store.
func (s *Store) RenameWorkerToken(ctx context.Context, accountID, id, name string) (store.Secret, error) {
	e := newExprs()
	if name == "" {
		return s.updateSecret(ctx, workerTokens, accountID, id, e, nil, []string{e.n(aName)})
	}
	return s.updateSecret(ctx, workerTokens, accountID, id, e, []string{e.n(aName) + " = " + e.v(":name", str(name))}, nil)
}

// updateSecret sets and removes attributes (placeholders of e) of the
// hash items of the account's secrets with public id (two could share
// one, as ids are hash prefixes), one write each, and returns the first,
// oldest, as stored. A crash between two leaves the rest as they were;
// the caller's retry changes them.
func (s *Store) updateSecret(ctx context.Context, kind secretKind, accountID, id string, e *exprs, set, remove []string) (store.Secret, error) {
	fail := func(err error) (store.Secret, error) {
		return store.Secret{}, fmt.Errorf("dynamo: update %s %s of %s: %w", kind.name, id, accountID, err)
	}
	mine, err := s.listSecrets(ctx, kind, accountID)
	if err != nil {
		return fail(err)
	}
	var update []string
	if len(set) > 0 {
		update = append(update, "SET "+strings.Join(set, ", "))
	}
	if len(remove) > 0 {
		update = append(update, "REMOVE "+strings.Join(remove, ", "))
	}
	cond := "attribute_exists(pk) AND " + e.n(aAccount) + " = " + e.v(":account", str(accountID))
	var out []store.Secret
	for _, sec := range mine {
		if sec.ID != id {
			continue
		}
		if len(update) == 0 {
			out = append(out, sec)
			continue
		}
		res, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(),
			Key: kind.hashKey(sec.Hash).av(), UpdateExpression: aws.String(strings.Join(update, " ")),
			ConditionExpression: aws.String(cond), ExpressionAttributeNames: e.names,
			ExpressionAttributeValues: e.values, ReturnValues: types.ReturnValueAllNew})
		if err != nil {
			return fail(err) // a failed condition too: the item was listed
		}
		var it secretItem
		if err := unmarshal(res.Attributes, &it); err != nil {
			return fail(err)
		}
		s.learn(kind, it)
		out = append(out, it.secret())
	}
	if len(out) == 0 {
		return fail(store.ErrNotFound)
	}
	return out[0], nil
}

// query runs q on the table (or its index, if q names one) and calls fn for
// every item on every page.
func (s *Store) query(ctx context.Context, q *dynamodb.QueryInput, fn func(map[string]types.AttributeValue) error) error {
	q.TableName = s.tableName()
	p := dynamodb.NewQueryPaginator(s.db, q)
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			if err := fn(item); err != nil {
				return err
			}
		}
	}
	return nil
}

// queryUpTo runs q on the table (or its index, if q names one) and calls fn
// for its items until it has seen limit of them or q has no more: each page
// asks for the items still wanted (a page may stop short of them at 1 MB).
// q.ExclusiveStartKey, if set, is where it starts.
func (s *Store) queryUpTo(ctx context.Context, q *dynamodb.QueryInput, limit int, fn func(map[string]types.AttributeValue) error) error {
	q.TableName = s.tableName()
	for seen := 0; seen < limit; {
		q.Limit = aws.Int32(int32(limit - seen))
		page, err := s.db.Query(ctx, q)
		if err != nil {
			return err
		}
		for _, item := range page.Items {
			if err := fn(item); err != nil {
				return err
			}
			seen++
		}
		if len(page.LastEvaluatedKey) == 0 {
			return nil
		}
		q.ExclusiveStartKey = page.LastEvaluatedKey
	}
	return nil
}

// revokeSecret revokes the account's secrets with public id, each in its
// own transaction (hash item, index item, active count). A crash between two
// of them leaves the rest active; the retry the caller makes revokes them.
func (s *Store) revokeSecret(ctx context.Context, kind secretKind, accountID, id string, at time.Time) ([]string, error) {
	if at.IsZero() {
		return nil, fmt.Errorf("dynamo: revoke %s %s: zero time", kind.name, id)
	}
	fail := func(err error) ([]string, error) {
		return nil, fmt.Errorf("dynamo: revoke %s %s of %s: %w", kind.name, id, accountID, err)
	}
	mine, err := s.listSecrets(ctx, kind, accountID)
	if err != nil {
		return fail(err)
	}
	var hashes []string
	for _, sec := range mine {
		if sec.ID != id {
			continue
		}
		hashes = append(hashes, sec.Hash)
		if !sec.Active() {
			continue // revoking twice keeps the first time
		}
		set := func(k key, cond string) types.TransactWriteItem {
			return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: k.av(),
				UpdateExpression:          aws.String("SET #revoked = :at"),
				ConditionExpression:       aws.String(cond),
				ExpressionAttributeNames:  names(aRevoked),
				ExpressionAttributeValues: map[string]types.AttributeValue{":at": num(nanos(at))}}}
		}
		err := s.transact(ctx, []types.TransactWriteItem{
			set(kind.hashKey(sec.Hash), "attribute_exists(pk) AND attribute_not_exists(#revoked)"),
			set(kind.indexKey(sec), "attribute_exists(pk)"),
			{Update: &types.Update{TableName: s.tableName(), Key: kind.countKey(accountID).av(),
				UpdateExpression:          aws.String("SET #active = #active - :one"),
				ConditionExpression:       aws.String("#active > :zero"),
				ExpressionAttributeNames:  names(aActive),
				ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0), ":one": num(1)}}},
		})
		var tf *txFailed
		if errors.As(err, &tf) && tf.failed(0) {
			continue // revoked meanwhile by another call
		}
		if err != nil {
			return fail(err)
		}
	}
	if len(hashes) == 0 {
		return fail(store.ErrNotFound)
	}
	if !kind.workers {
		return nil, nil
	}
	var conns []string
	for _, h := range hashes {
		err := s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
			ExpressionAttributeNames:  names(schema.PK, schema.SK),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(kind.hashKey(h).PK), ":prefix": str(sConn)},
			ConsistentRead:            aws.Bool(true),
		}, func(item map[string]types.AttributeValue) error {
			var k key
			if err := unmarshal(item, &k); err != nil {
				return err
			}
			conns = append(conns, k.SK[len(sConn):])
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	return conns, nil
}

// UseNonce implements store.Store: one conditional put that succeeds when
// the nonce is new or its previous use expired; a random token of the call
// tells an SDK retry of our own put from a replay. DynamoDB's TTL deletes
// expired nonces in the background; the condition does not rely on it.
func (s *Store) UseNonce(ctx context.Context, nonce string, expires time.Time) error {
	if nonce == "" {
		return errors.New("dynamo: use nonce: empty nonce")
	}
	item := nonceKey(nonce).av()
	item[aExpires] = num(expires.UnixNano())
	item[schema.TTL] = num(ttl(expires) + 1)
	token := callToken()
	item[aToken] = str(token)
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.tableName(), Item: item,
		ConditionExpression:       aws.String("attribute_not_exists(pk) OR #expires <= :now"),
		ExpressionAttributeNames:  names(aExpires),
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(s.now().UnixNano())}})
	if isConditionFailed(err) {
		// Our own first attempt, whose reply was lost, is not a replay.
		err = s.ownWrite(ctx, nonceKey(nonce), token, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("dynamo: use nonce: %w", err)
	}
	return nil
}
