package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// tokenConnKey is the item that lists a live worker under its token, so that
// revoking the token finds the connection without a scan.
func tokenConnKey(tokenHash, conn string) key {
	return key{workerTokens.hashKey(tokenHash).PK, sConn + conn}
}

// tokenLiveKey is the item that counts a token's live workers, for the
// MaxConnsPerToken cap. ver goes up with every change of the count, so
// that a recount can tell whether anything changed while it counted.
func tokenLiveKey(tokenHash string) key {
	return key{workerTokens.hashKey(tokenHash).PK, sLive}
}

// liveCount is the count item as stored.
type liveCount struct {
	Count   int64 `dynamodbav:"count"`
	Version int64 `dynamodbav:"ver"`
}

// The items of PutWorker's transaction, in order; the identity's
// reputation, where the worker has one, comes after these.
const (
	putWorkerItem    = iota // the worker: a new connection
	putConnEntry            // its entry under the token
	putTokenCheck           // the token: not revoked
	putLiveCount            // the token's live count: below the cap
	putTokenStanding        // the token's standing: as read
)

// PutWorker implements store.Store: the worker, its entry under its token
// and the token's live count, and the identity's reputation, in one
// transaction, on the conditions that the token is not revoked, the count
// is below the cap and the identity's and the token's standings are as
// read just before (their ver: a verdict, the only thing that bans,
// changes it). An empty State is stored as idle. A worker without a
// TokenHash counts against no token's cap: the relay always sets one;
// tests may not.
//
// The count can run high, never low: a connection whose $disconnect never
// came leaves it counted after its records expire. So when the cap
// refuses a connection, the count is taken again from the token's
// unexpired entries before the refusal stands (recount), and a contributor
// is never locked out by connections that are gone.
func (s *Store) PutWorker(ctx context.Context, w store.Worker) error {
	if w.Conn == "" {
		return errors.New("dynamo: put worker: empty connection id")
	}
	fail := func(err error) error { return fmt.Errorf("dynamo: put worker %s: %w", w.Conn, err) }
	if len(w.Models) > maxModels {
		return fail(fmt.Errorf("%d models, at most %d", len(w.Models), maxModels))
	}
	if w.State == "" {
		w.State = store.WorkerIdle
	}
	now := s.now()
	st, err := s.readStandings(ctx, w.AccountID, w.Pubkey, w.TokenHash)
	if err != nil {
		return fail(err)
	}
	tokenAt := -1 // the token's standing in the transaction
	if w.TokenHash != "" {
		tokenAt = putTokenStanding
	}
	for try := 0; ; try++ {
		if err := st.banned(); err != nil {
			return fail(err)
		}
		w.Standing, w.Strikes = st.worker()
		items, identityAt, err := s.putWorkerItems(w, now, st)
		if err != nil {
			return fail(err)
		}
		// Counted online in the same write: the put's condition lets it
		// through once.
		if c := s.onlineCountItem(w.Conn, ttl(now.Add(connectionTTL)), 1, registeredDeltas(w.Registered, w.Models, 1, nil)); c != nil {
			items = append(items, *c)
		}
		err = s.transact(ctx, items)
		var tf *txFailed
		switch {
		case err == nil:
			s.hints.setWorker(w)
			return nil
		case !errors.As(err, &tf):
			return fail(err)
		case tf.failed(putWorkerItem):
			return fail(store.ErrExists)
		case w.TokenHash != "" && tf.failed(putTokenCheck):
			return fail(fmt.Errorf("worker token: %w", store.ErrRevoked))
		case identityAt >= 0 && tf.failed(identityAt) || tokenAt >= 0 && tf.failed(tokenAt):
			// A verdict landed since the standings were read: take
			// them as they are now.
			if err := st.learn(tf, identityAt, tokenAt); err != nil {
				return fail(err)
			}
		case w.TokenHash != "" && tf.failed(putLiveCount):
			var old liveCount
			if err := unmarshal(tf.old(putLiveCount), &old); err != nil {
				return fail(err)
			}
			live, fixed, err := s.recount(ctx, w.TokenHash, old, now)
			if err != nil {
				return fail(err)
			}
			if fixed && live >= s.maxConns || !fixed && live == old.Count {
				return fail(fmt.Errorf("%d of %d connections on the worker token: %w", live, s.maxConns, store.ErrLimit))
			}
			// The count was stale, or changed while it was recounted:
			// try again against the count as it is now.
		default:
			return fail(tf)
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("the standings or the live count of the worker token keep changing: %w", store.ErrConflict))
		}
	}
}

// putWorkerItems is PutWorker's transaction (see the putWorkerItem
// constants) for w with the standings st, and where the identity's
// reputation is in it (-1: a worker without a pubkey has none).
func (s *Store) putWorkerItems(w store.Worker, now time.Time, st standings) ([]types.TransactWriteItem, int, error) {
	item, err := marshal(toWorkerItem(w, now))
	if err != nil {
		return nil, -1, err
	}
	items := []types.TransactWriteItem{putWorkerItem: {Put: &types.Put{TableName: s.tableName(), Item: item, ConditionExpression: notExists}}}
	if w.TokenHash != "" {
		entry := tokenConnKey(w.TokenHash, w.Conn).av()
		entry[schema.TTL] = num(ttl(now.Add(connectionTTL)))
		items = append(items,
			types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: entry}},
			// The token must not be revoked now: a revoke that ran
			// after the caller checked the token would otherwise miss
			// this connection (it lists the token's connections).
			types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: workerTokens.hashKey(w.TokenHash).av(), ConditionExpression: aws.String("attribute_not_exists(#revoked)"),
				ExpressionAttributeNames: names(aRevoked)}},
			types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: tokenLiveKey(w.TokenHash).av(),
				UpdateExpression:                    aws.String("SET #count = if_not_exists(#count, :zero) + :one, #ver = if_not_exists(#ver, :zero) + :one"),
				ConditionExpression:                 aws.String("attribute_not_exists(#count) OR #count < :max"),
				ExpressionAttributeNames:            names(aCount, aVersion),
				ExpressionAttributeValues:           values{":zero": num(0), ":one": num(1), ":max": num(s.maxConns)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
			types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: tokenStandingKey(w.TokenHash).av(), ConditionExpression: aws.String(verAsRead),
				ExpressionAttributeNames: names(aVersion), ExpressionAttributeValues: values{":ver": num(st.token.Version)},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
	}
	if w.Pubkey == "" {
		return items, -1, nil
	}
	n := names(aTokenHash, aLastSeen, aFirstSeen, aStanding, aVersion)
	v := values{":th": str(w.TokenHash), ":at": num(nanos(w.ConnectedAt)), ":active": str(string(store.StandingActive)),
		":ver": num(st.identity.Version)}
	set := nameIdentity(w.AccountID, w.Pubkey, n, v) +
		", #token_hash = :th, #last_seen = :at, #first_seen = if_not_exists(#first_seen, :at), #standing = if_not_exists(#standing, :active)"
	items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key: identityKey(w.AccountID, w.Pubkey).av(), UpdateExpression: aws.String("SET " + set),
		ConditionExpression:      aws.String(verAsRead),
		ExpressionAttributeNames: n, ExpressionAttributeValues: v,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
	return items, len(items) - 1, nil
}

// recount counts the token's unexpired connection entries and, if that
// differs from old (the count item as a refused PutWorker saw it), stores
// it in place of old. fixed reports whether it did: it does not when a
// connect or disconnect changed the count meanwhile (ver moved on), since
// the entries read may then not match any one count.
//
// Entries past their TTL belong to connections API Gateway closed long ago
// (it closes every connection within 2 hours) whose $disconnect never came;
// DeleteWorker does not count them down again (see there).
func (s *Store) recount(ctx context.Context, tokenHash string, old liveCount, now time.Time) (live int64, fixed bool, err error) {
	err = s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		FilterExpression:          aws.String("#ttl > :now"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK, schema.TTL),
		ExpressionAttributeValues: values{":pk": str(workerTokens.hashKey(tokenHash).PK), ":prefix": str(sConn), ":now": num(ttl(now))},
		ConsistentRead:            aws.Bool(true),
	}, func(map[string]types.AttributeValue) error {
		live++
		return nil
	})
	if err != nil {
		return 0, false, fmt.Errorf("recount connections on the worker token: %w", err)
	}
	if live == old.Count {
		return live, false, nil
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: tokenLiveKey(tokenHash).av(),
		UpdateExpression:          aws.String("SET #count = :live, #ver = :next"),
		ConditionExpression:       aws.String("#ver = :ver"),
		ExpressionAttributeNames:  names(aCount, aVersion),
		ExpressionAttributeValues: values{":live": num(live), ":next": num(old.Version + 1), ":ver": num(old.Version)}})
	if isConditionFailed(err) {
		return live, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store the recounted connections of the worker token: %w", err)
	}
	return live, true, nil
}

// RegisterWorker implements store.Store: it reads the worker (for its
// token, and to return it) and registers it in one transaction with a
// check that its token is not revoked, conditioned on the fields it read,
// so that the worker it returns is the one it wrote.
func (s *Store) RegisterWorker(ctx context.Context, conn string, models []string, caps map[string]store.Caps) (store.Worker, error) {
	fail := func(err error) (store.Worker, error) {
		return store.Worker{}, fmt.Errorf("dynamo: register worker %s: %w", conn, err)
	}
	if len(models) > maxModels {
		return fail(fmt.Errorf("%d models, at most %d", len(models), maxModels))
	}
	list, err := marshalList(models)
	if err != nil {
		return fail(err)
	}
	capsItems := toCapsItems(store.RegisteredCaps(models, caps))
	update, capsValue := "SET #models = :models, #registered = :t REMOVE #caps", types.AttributeValue(nil)
	if capsItems != nil {
		if capsValue, err = attributevalue.Marshal(capsItems); err != nil {
			return fail(fmt.Errorf("encode caps: %w", err))
		}
		update = "SET #models = :models, #registered = :t, #caps = :caps"
	}
	var it workerItem
	if err := s.get(ctx, workerKey(conn), &it); err != nil {
		return fail(err)
	}
	for try := 0; ; try++ {
		oldModels, err := marshalList(it.Models)
		if err != nil {
			return fail(err)
		}
		v := values{":models": list, ":t": boolean(true), ":token": str(it.TokenHash),
			":state": str(it.State), ":job": str(it.Job), ":draining": boolean(it.Draining), ":speed": num(it.Speed),
			":was_registered": boolean(it.Registered), ":old_models": oldModels}
		if capsValue != nil {
			v[":caps"] = capsValue
		}
		// The registration and models as read are conditions too: the
		// counts change from them to the new ones in the same write.
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: workerKey(conn).av(),
			UpdateExpression: aws.String(update),
			ConditionExpression: aws.String("attribute_exists(pk) AND #token_hash = :token AND #state = :state AND #job = :job" +
				" AND #draining = :draining AND #milli_tok_per_sec = :speed AND #registered = :was_registered AND #models = :old_models"),
			ExpressionAttributeNames:            names(aModels, aReg, aCaps, aTokenHash, aState, aJob, aDraining, aSpeed),
			ExpressionAttributeValues:           v,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		if it.TokenHash != "" {
			// A revoke that raced this connection's $connect may have
			// missed it (API Gateway refuses to close a connection
			// still in $connect); its first message ends here.
			items = append(items, types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: workerTokens.hashKey(it.TokenHash).av(), ConditionExpression: aws.String("attribute_not_exists(#revoked)"),
				ExpressionAttributeNames: names(aRevoked)}})
		}
		deltas := registeredDeltas(true, models, 1, registeredDeltas(it.Registered, it.Models, -1, nil))
		if c := s.onlineCountItem(conn, it.TTL, 0, deltas); c != nil {
			items = append(items, *c)
		}
		err = s.transact(ctx, items)
		var tf *txFailed
		switch {
		case err == nil:
			it.Models, it.Caps, it.Registered = models, capsItems, true
			w := it.worker()
			s.hints.setWorker(w)
			return w, nil
		case !errors.As(err, &tf):
			return fail(err)
		case tf.failed(0) && tf.old(0) == nil:
			return fail(store.ErrNotFound)
		case tf.failed(1):
			return fail(fmt.Errorf("worker token: %w", store.ErrRevoked))
		case !tf.failed(0):
			return fail(tf)
		}
		it = workerItem{}
		if err := unmarshal(tf.old(0), &it); err != nil {
			return fail(err)
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("worker keeps changing: %w", store.ErrConflict))
		}
	}
}

func marshalList(ss []string) (types.AttributeValue, error) {
	l := &types.AttributeValueMemberL{Value: []types.AttributeValue{}}
	for _, s := range ss {
		l.Value = append(l.Value, str(s))
	}
	return l, nil
}

// DrainWorker implements store.Store.
func (s *Store) DrainWorker(ctx context.Context, conn string) (store.Worker, error) {
	w, err := s.changeWorker(ctx, conn, "SET #draining = :t", names(aDraining), values{":t": boolean(true)})
	if err != nil {
		return store.Worker{}, fmt.Errorf("dynamo: drain worker %s: %w", conn, err)
	}
	return w, nil
}

// changeWorker applies update to an existing worker and returns it as it
// is after.
func (s *Store) changeWorker(ctx context.Context, conn, update string, n map[string]string, v values) (store.Worker, error) {
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: workerKey(conn).av(),
		UpdateExpression: aws.String(update), ConditionExpression: exists,
		ExpressionAttributeNames: n, ExpressionAttributeValues: v, ReturnValues: types.ReturnValueAllNew})
	if isConditionFailed(err) {
		return store.Worker{}, store.ErrNotFound
	}
	if err != nil {
		return store.Worker{}, err
	}
	var it workerItem
	if err := unmarshal(out.Attributes, &it); err != nil {
		return store.Worker{}, err
	}
	w := it.worker()
	s.hints.setWorker(w)
	return w, nil
}

// GetWorker implements store.Store.
func (s *Store) GetWorker(ctx context.Context, conn string) (store.Worker, error) {
	var it workerItem
	if err := s.get(ctx, workerKey(conn), &it); err != nil {
		return store.Worker{}, fmt.Errorf("dynamo: get worker %s: %w", conn, err)
	}
	w := it.worker()
	s.hints.setWorker(w)
	return w, nil
}

// DeleteWorker implements store.Store. It returns the worker as it was when
// deleted: the delete is conditioned on the state and job it read, and
// reads again if they changed in between, because the caller requeues or
// fails the job it returns.
//
// The token's live count goes down in the same transaction, on the
// condition that the connection's entry has not expired. An expired one
// was left out of any recount since (see PutWorker), so counting it down
// as well would take the count below the truth; and the count never goes
// below zero. Either way the worker is deleted: a disconnect never fails
// on the count.
func (s *Store) DeleteWorker(ctx context.Context, conn string) (store.Worker, error) {
	fail := func(err error) (store.Worker, error) {
		return store.Worker{}, fmt.Errorf("dynamo: delete worker %s: %w", conn, err)
	}
	var it workerItem
	if err := s.get(ctx, workerKey(conn), &it); err != nil {
		return fail(err)
	}
	countDown := true
	for try := 0; ; try++ {
		models, err := marshalList(it.Models)
		if err != nil {
			return fail(err)
		}
		// The registration and models read are conditions, as the
		// online counts go down by them in the same write.
		items := []types.TransactWriteItem{{Delete: &types.Delete{TableName: s.tableName(), Key: workerKey(conn).av(),
			ConditionExpression:                 aws.String("#state = :state AND #job = :job AND #registered = :registered AND #models = :models"),
			ExpressionAttributeNames:            names(aState, aJob, aReg, aModels),
			ExpressionAttributeValues:           values{":state": str(it.State), ":job": str(it.Job), ":registered": boolean(it.Registered), ":models": models},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		switch {
		case it.TokenHash != "" && countDown:
			items = append(items,
				types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(), Key: tokenConnKey(it.TokenHash, conn).av(),
					ConditionExpression:       aws.String("#ttl > :now"),
					ExpressionAttributeNames:  names(schema.TTL),
					ExpressionAttributeValues: values{":now": num(ttl(s.now()))}}},
				types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: tokenLiveKey(it.TokenHash).av(),
					UpdateExpression:          aws.String("SET #count = #count - :one, #ver = #ver + :one"),
					ConditionExpression:       aws.String("#count > :zero"),
					ExpressionAttributeNames:  names(aCount, aVersion),
					ExpressionAttributeValues: values{":zero": num(0), ":one": num(1)}}})
		case it.TokenHash != "":
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(),
				Key: tokenConnKey(it.TokenHash, conn).av()}})
		}
		// Counted down even when the record expired: its bucket is no
		// longer read by then, or, within its last hour, the count is
		// right again.
		if c := s.onlineCountItem(conn, it.TTL, -1, registeredDeltas(it.Registered, it.Models, -1, nil)); c != nil {
			items = append(items, *c)
		}
		err = s.transact(ctx, items)
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			return it.worker(), nil
		}
		if tf.failed(1) || tf.failed(2) {
			// The entry expired (or is gone), or the count is at zero:
			// delete without counting down.
			countDown = false
		}
		if tf.failed(0) {
			old := tf.old(0)
			if old == nil {
				return fail(store.ErrNotFound)
			}
			it = workerItem{}
			if err := unmarshal(old, &it); err != nil {
				return fail(err)
			}
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("worker keeps changing: %w", store.ErrConflict))
		}
	}
}

// IdleWorkers implements store.Store: the worker shards of the index, read
// in parallel and filtered on the server. The index lags the table by a
// moment, so a worker taken a moment ago may be listed; Assign's condition
// decides.
func (s *Store) IdleWorkers(ctx context.Context, model string) ([]store.Worker, error) {
	out, err := s.workers(ctx, &filter{
		// An expired record is a connection whose $disconnect never
		// came; TTL deletes it within days, not at once.
		expr:  "#registered = :t AND #draining = :f AND #state = :idle AND contains(#models, :model) AND #ttl > :now",
		names: names(aReg, aDraining, aState, aModels, schema.TTL),
		values: values{":t": boolean(true), ":f": boolean(false), ":idle": str(string(store.WorkerIdle)),
			":model": str(model), ":now": num(ttl(s.now()))},
	})
	if err != nil {
		return nil, fmt.Errorf("dynamo: idle workers for %s: %w", model, err)
	}
	return out, nil
}

// Workers implements store.Store.
func (s *Store) Workers(ctx context.Context) ([]store.Worker, error) {
	out, err := s.workers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("dynamo: workers: %w", err)
	}
	return out, nil
}

type filter struct {
	expr   string
	names  map[string]string
	values values
}

func (s *Store) workers(ctx context.Context, f *filter) ([]store.Worker, error) {
	return queryShards(ctx, s, gWorker, workerShards, f, func(item map[string]types.AttributeValue) (store.Worker, error) {
		var it workerItem
		if err := unmarshal(item, &it); err != nil {
			return store.Worker{}, err
		}
		w := it.worker()
		s.hints.setWorker(w)
		return w, nil
	})
}

// queryShards queries the index partitions <prefix>0 to <prefix><n-1> in
// parallel, filtered on the server if f is set, and returns what decode
// makes of their items, shard after shard. decode runs in the shards'
// goroutines.
func queryShards[T any](ctx context.Context, s *Store, prefix string, n int, f *filter,
	decode func(map[string]types.AttributeValue) (T, error)) ([]T, error) {
	results := make([][]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := &dynamodb.QueryInput{IndexName: aws.String(schema.Index),
				KeyConditionExpression:    aws.String("#gpk = :gpk"),
				ExpressionAttributeNames:  map[string]string{"#gpk": schema.GPK},
				ExpressionAttributeValues: values{":gpk": str(fmt.Sprintf("%s%d", prefix, i))},
			}
			if f != nil {
				q.FilterExpression = aws.String(f.expr)
				maps.Copy(q.ExpressionAttributeNames, f.names)
				maps.Copy(q.ExpressionAttributeValues, f.values)
			}
			errs[i] = s.query(ctx, q, func(item map[string]types.AttributeValue) error {
				v, err := decode(item)
				results[i] = append(results[i], v)
				return err
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(results...), nil
}

// firstOfShards reads the index partitions parts in parallel, each in
// sort key order from the sort key from on ("": from its first), until it
// gave limit items or ran out, and returns what decode makes of all the
// items read, in sort key order: the first limit of them are the first
// limit of the partitions together. decode runs in the partitions'
// goroutines.
func firstOfShards[T any](ctx context.Context, s *Store, parts []string, from string, limit int,
	decode func(map[string]types.AttributeValue) (T, error)) ([]T, error) {
	type found struct {
		gsk string
		v   T
	}
	results := make([][]found, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() {
			q := &dynamodb.QueryInput{IndexName: aws.String(schema.Index),
				KeyConditionExpression:    aws.String("#gpk = :gpk"),
				ExpressionAttributeNames:  names(schema.GPK),
				ExpressionAttributeValues: values{":gpk": str(part)},
			}
			if from != "" {
				q.KeyConditionExpression = aws.String("#gpk = :gpk AND #gsk >= :from")
				q.ExpressionAttributeNames = names(schema.GPK, schema.GSK)
				q.ExpressionAttributeValues[":from"] = str(from)
			}
			errs[i] = s.queryUpTo(ctx, q, limit, func(item map[string]types.AttributeValue) error {
				v, err := decode(item)
				f := found{v: v}
				if gsk, ok := item[schema.GSK].(*types.AttributeValueMemberS); ok { // an index item has one
					f.gsk = gsk.Value
				}
				results[i] = append(results[i], f)
				return err
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all := slices.Concat(results...)
	slices.SortFunc(all, func(a, b found) int { return strings.Compare(a.gsk, b.gsk) })
	out := make([]T, len(all))
	for i, f := range all {
		out[i] = f.v
	}
	return out, nil
}

// PutListener implements store.Store. It overwrites: a listener record has
// no state to lose.
func (s *Store) PutListener(ctx context.Context, l store.Listener) error {
	if l.Conn == "" {
		return errors.New("dynamo: put listener: empty connection id")
	}
	item, err := marshal(listenerItem{key: listenerKey(l.Conn), Conn: l.Conn, ConnectedAt: nanos(l.ConnectedAt),
		TTL: ttl(s.now().Add(connectionTTL))})
	if err == nil {
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: s.tableName(), Item: item})
	}
	if err != nil {
		return fmt.Errorf("dynamo: put listener %s: %w", l.Conn, err)
	}
	return nil
}

// GetListener implements store.Store.
func (s *Store) GetListener(ctx context.Context, conn string) (store.Listener, error) {
	var it listenerItem
	if err := s.get(ctx, listenerKey(conn), &it); err != nil {
		return store.Listener{}, fmt.Errorf("dynamo: get listener %s: %w", conn, err)
	}
	return store.Listener{Conn: it.Conn, ConnectedAt: fromNanos(it.ConnectedAt)}, nil
}

// DeleteListener implements store.Store.
func (s *Store) DeleteListener(ctx context.Context, conn string) error {
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.tableName(), Key: listenerKey(conn).av(),
		ConditionExpression: exists})
	if isConditionFailed(err) {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("dynamo: delete listener %s: %w", conn, err)
	}
	return nil
}

// ResetConnections is for a gateway whose relay just started, so that no
// connection from before exists: the dev runner on DynamoDB. It deletes
// every worker and listener record, with the tokens' connection entries and
// live counts, fails, with a refund, every job left queued or assigned
// (their prompts lived in the memory of the process that stopped), and
// starts the queue and online counts (Stats) from zero. It scans
// the whole table; never call it in AWS, where relay connections outlive
// any one function instance.
func (s *Store) ResetConnections(ctx context.Context, reason string, now time.Time) error {
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{TableName: s.tableName(),
		FilterExpression: aws.String("begins_with(pk, :w) OR begins_with(pk, :l) OR (begins_with(pk, :t) AND (begins_with(sk, :c) OR sk = :live))" +
			" OR (begins_with(pk, :j) AND (#state = :queued OR #state = :assigned))"),
		ExpressionAttributeNames: names(aState),
		ExpressionAttributeValues: values{":w": str(pWorker), ":l": str(pListener), ":t": str(workerTokens.prefix),
			":c": str(sConn), ":live": str(sLive), ":j": str(pJob),
			":queued": str(string(store.JobQueued)), ":assigned": str(string(store.JobAssigned))},
		ConsistentRead: aws.Bool(true)})
	var jobs, workers []string
	var stale []key
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
		for _, item := range page.Items {
			var k key
			if err := unmarshal(item, &k); err != nil {
				return err
			}
			switch {
			case strings.HasPrefix(k.PK, pJob):
				jobs = append(jobs, strings.TrimPrefix(k.PK, pJob))
			case strings.HasPrefix(k.PK, pWorker):
				workers = append(workers, strings.TrimPrefix(k.PK, pWorker))
			default:
				stale = append(stale, k)
			}
		}
	}
	for _, id := range jobs {
		if _, err := s.Fail(ctx, id, reason, true, now); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
	}
	for _, conn := range workers {
		if _, err := s.DeleteWorker(ctx, conn); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
	}
	// Listeners, and what the workers' deletes left of their tokens'
	// bookkeeping: entries of records that had expired, and the counts,
	// which must start from zero now that no connection exists.
	for _, k := range stale {
		if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.tableName(), Key: k.av()}); err != nil {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
	}
	return s.resetCounts(ctx)
}

// resetCounts deletes the queue and online count items, for
// ResetConnections once no job is queued and no worker connected: the
// counts start from zero, and a table from before they were kept (whose
// jobs failed just now were never counted in) starts right too.
func (s *Store) resetCounts(ctx context.Context) error {
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{TableName: s.tableName(),
		FilterExpression:          aws.String("begins_with(pk, :stats) AND (sk = :queue OR begins_with(sk, :online))"),
		ExpressionAttributeValues: values{":stats": str(pStats), ":queue": str(sQueued), ":online": str(sOnline)},
		ProjectionExpression:      aws.String("pk, sk"),
		ConsistentRead:            aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("dynamo: reset counts: %w", err)
		}
		for _, item := range page.Items {
			if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.tableName(),
				Key: map[string]types.AttributeValue{schema.PK: item[schema.PK], schema.SK: item[schema.SK]}}); err != nil {
				return fmt.Errorf("dynamo: reset counts: %w", err)
			}
		}
	}
	return nil
}
