package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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

// PutWorker implements store.Store: the worker and its entry under its
// token, in one transaction, on the condition that the token is not
// revoked. An empty State is stored as idle.
func (s *Store) PutWorker(ctx context.Context, w store.Worker) error {
	if w.Conn == "" {
		return errors.New("dynamo: put worker: empty connection id")
	}
	if len(w.Models) > maxModels {
		return fmt.Errorf("dynamo: put worker %s: %d models, at most %d", w.Conn, len(w.Models), maxModels)
	}
	if w.State == "" {
		w.State = store.WorkerIdle
	}
	item, err := marshal(toWorkerItem(w, s.now()))
	if err != nil {
		return err
	}
	items := []types.TransactWriteItem{{Put: &types.Put{TableName: s.tableName(), Item: item, ConditionExpression: notExists}}}
	if w.TokenHash != "" {
		entry := tokenConnKey(w.TokenHash, w.Conn).av()
		entry[schema.TTL] = num(ttl(s.now().Add(connectionTTL)))
		// The token must not be revoked now: a revoke that ran after
		// the caller checked the token would otherwise miss this
		// connection (it lists the token's connections).
		items = append(items,
			types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: entry}},
			types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: workerTokens.hashKey(w.TokenHash).av(), ConditionExpression: aws.String("attribute_not_exists(#revoked)"),
				ExpressionAttributeNames: names(aRevoked)}})
	}
	err = s.transact(ctx, items)
	var tf *txFailed
	switch {
	case errors.As(err, &tf) && tf.failed(0):
		err = store.ErrExists
	case errors.As(err, &tf) && tf.failed(2):
		err = fmt.Errorf("worker token: %w", store.ErrRevoked)
	}
	if err != nil {
		return fmt.Errorf("dynamo: put worker %s: %w", w.Conn, err)
	}
	s.hints.setWorker(w)
	return nil
}

// RegisterWorker implements store.Store.
func (s *Store) RegisterWorker(ctx context.Context, conn string, models []string) (store.Worker, error) {
	if len(models) > maxModels {
		return store.Worker{}, fmt.Errorf("dynamo: register worker %s: %d models, at most %d", conn, len(models), maxModels)
	}
	list, err := marshalList(models)
	if err != nil {
		return store.Worker{}, err
	}
	w, err := s.changeWorker(ctx, conn, "SET #models = :models, #registered = :t", names(aModels, aReg),
		values{":models": list, ":t": boolean(true)})
	if err != nil {
		return store.Worker{}, fmt.Errorf("dynamo: register worker %s: %w", conn, err)
	}
	return w, nil
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
func (s *Store) DeleteWorker(ctx context.Context, conn string) (store.Worker, error) {
	fail := func(err error) (store.Worker, error) {
		return store.Worker{}, fmt.Errorf("dynamo: delete worker %s: %w", conn, err)
	}
	var it workerItem
	if err := s.get(ctx, workerKey(conn), &it); err != nil {
		return fail(err)
	}
	for try := 0; ; try++ {
		items := []types.TransactWriteItem{{Delete: &types.Delete{TableName: s.tableName(), Key: workerKey(conn).av(),
			ConditionExpression:                 aws.String("#state = :state AND #job = :job"),
			ExpressionAttributeNames:            names(aState, aJob),
			ExpressionAttributeValues:           values{":state": str(it.State), ":job": str(it.Job)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		if it.TokenHash != "" {
			items = append(items, types.TransactWriteItem{Delete: &types.Delete{TableName: s.tableName(),
				Key: tokenConnKey(it.TokenHash, conn).av()}})
		}
		err := s.transact(ctx, items)
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			return it.worker(), nil
		}
		old := tf.old(0)
		if old == nil {
			return fail(store.ErrNotFound)
		}
		it = workerItem{}
		if err := unmarshal(old, &it); err != nil {
			return fail(err)
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
	results := make([][]store.Worker, workerShards)
	errs := make([]error, workerShards)
	var wg sync.WaitGroup
	for i := range workerShards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := &dynamodb.QueryInput{IndexName: aws.String(schema.Index),
				KeyConditionExpression:    aws.String("#gpk = :gpk"),
				ExpressionAttributeNames:  map[string]string{"#gpk": schema.GPK},
				ExpressionAttributeValues: values{":gpk": str(fmt.Sprintf("%s%d", gWorker, i))},
			}
			if f != nil {
				q.FilterExpression = aws.String(f.expr)
				for k, v := range f.names {
					q.ExpressionAttributeNames[k] = v
				}
				for k, v := range f.values {
					q.ExpressionAttributeValues[k] = v
				}
			}
			errs[i] = s.query(ctx, q, func(item map[string]types.AttributeValue) error {
				var it workerItem
				if err := unmarshal(item, &it); err != nil {
					return err
				}
				w := it.worker()
				s.hints.setWorker(w)
				results[i] = append(results[i], w)
				return nil
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []store.Worker
	for _, r := range results {
		out = append(out, r...)
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
// every worker and listener record and fails, with a refund, every job left
// queued or assigned (their prompts lived in the memory of the process that
// stopped). It scans the whole table; never call it in AWS, where relay
// connections outlive any one function instance.
func (s *Store) ResetConnections(ctx context.Context, reason string, now time.Time) error {
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{TableName: s.tableName(),
		FilterExpression:          aws.String("begins_with(pk, :w) OR begins_with(pk, :l) OR (begins_with(pk, :j) AND (#state = :queued OR #state = :assigned))"),
		ExpressionAttributeNames:  names(aState),
		ExpressionAttributeValues: values{":w": str(pWorker), ":l": str(pListener), ":j": str(pJob), ":queued": str(string(store.JobQueued)), ":assigned": str(string(store.JobAssigned))},
		ConsistentRead:            aws.Bool(true)})
	var jobs []string
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
			if strings.HasPrefix(k.PK, pJob) {
				jobs = append(jobs, strings.TrimPrefix(k.PK, pJob))
			} else {
				stale = append(stale, k)
			}
		}
	}
	for _, id := range jobs {
		if _, err := s.Fail(ctx, id, reason, true, now); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
	}
	for _, k := range stale {
		if strings.HasPrefix(k.PK, pWorker) {
			if _, err := s.DeleteWorker(ctx, strings.TrimPrefix(k.PK, pWorker)); err != nil && !errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("dynamo: reset connections: %w", err)
			}
			continue
		}
		if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.tableName(), Key: k.av()}); err != nil {
			return fmt.Errorf("dynamo: reset connections: %w", err)
		}
	}
	return nil
}
