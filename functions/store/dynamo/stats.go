package dynamo

import (
	"context"
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

// Stats implements store.Store. Live workers and queued jobs come from one
// scan of the index, which holds only those (it is sparse); the totals are
// the sum of the counter shards, read in one batch.
func (s *Store) Stats(ctx context.Context, now time.Time) (store.Stats, error) {
	st := store.Stats{WorkersByModel: map[string]int64{}, QueueByModel: map[string]int64{}}
	fail := func(err error) (store.Stats, error) { return store.Stats{}, fmt.Errorf("dynamo: stats: %w", err) }
	p := dynamodb.NewScanPaginator(s.db, &dynamodb.ScanInput{TableName: s.tableName(), IndexName: aws.String(schema.Index)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fail(err)
		}
		for _, item := range page.Items {
			var head struct {
				GPK string `dynamodbav:"gpk"`
			}
			if err := unmarshal(item, &head); err != nil {
				return fail(err)
			}
			switch {
			case strings.HasPrefix(head.GPK, gWorker):
				var it workerItem
				if err := unmarshal(item, &it); err != nil {
					return fail(err)
				}
				if it.Registered {
					for _, m := range it.Models {
						st.WorkersByModel[m]++
					}
				}
			case strings.HasPrefix(head.GPK, gQueue):
				var it jobItem
				if err := unmarshal(item, &it); err != nil {
					return fail(err)
				}
				if it.State == string(store.JobQueued) {
					st.QueueByModel[it.Model]++
				}
			}
		}
	}
	lastFull := sMinute + timeKey(now.Truncate(time.Minute).Add(-time.Minute))
	var keys []map[string]types.AttributeValue
	for i := range statShards {
		p := fmt.Sprintf("%s%d", pStats, i)
		keys = append(keys, key{p, sTotal}.av(), key{p, lastFull}.av())
	}
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var c struct {
			SK     string `dynamodbav:"sk"`
			Jobs   int64  `dynamodbav:"jobs"`
			Tokens int64  `dynamodbav:"tokens"`
		}
		if err := unmarshal(item, &c); err != nil {
			return err
		}
		if c.SK == sTotal {
			st.JobsCompleted += c.Jobs
			st.TokensServed += c.Tokens
		} else {
			st.TokensLastMinute += c.Tokens
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return st, nil
}

// The attributes of the money totals (store.Money) on the stats shards'
// total items.
const (
	aMoneyDeposited  = "money_deposited"
	aMoneyGranted    = "money_granted"
	aMoneyRecognized = "money_recognized"
	aMoneyEarned     = "money_earned"
	aMoneyPaidOut    = "money_paid_out"
)

// moneyAdds is the ADD clauses, names and values that add m's non-zero
// fields to a stats shard's total item.
func moneyAdds(m store.Money) (clauses []string, n map[string]string, v values) {
	n, v = map[string]string{}, values{}
	for _, f := range []struct {
		attr  string
		delta int64
	}{{aMoneyDeposited, m.Deposited}, {aMoneyGranted, m.Granted}, {aMoneyRecognized, m.Recognized},
		{aMoneyEarned, m.Earned}, {aMoneyPaidOut, m.PaidOut}} {
		if f.delta != 0 {
			clauses = append(clauses, "#"+f.attr+" :"+f.attr)
			n["#"+f.attr], v[":"+f.attr] = f.attr, num(f.delta)
		}
	}
	return clauses, n, v
}

// withMoney appends to a move's transaction the update that adds m to the
// money totals, on the stats shard chosen by seed (the move's job id or
// idempotency key), unless m is zero. No condition: the move's own items
// let it through once.
func (s *Store) withMoney(items []types.TransactWriteItem, seed string, m store.Money) []types.TransactWriteItem {
	clauses, n, v := moneyAdds(m)
	if len(clauses) == 0 {
		return items
	}
	return append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key:                      key{fmt.Sprintf("%s%d", pStats, shard(seed, statShards)), sTotal}.av(),
		UpdateExpression:         aws.String("ADD " + strings.Join(clauses, ", ")),
		ExpressionAttributeNames: n, ExpressionAttributeValues: v}})
}

// MoneyTotals implements store.Earnings: the sum of the stats shards'
// totals, read in one batch.
func (s *Store) MoneyTotals(ctx context.Context) (store.Money, error) {
	var m store.Money
	keys := make([]map[string]types.AttributeValue, 0, statShards)
	for i := range statShards {
		keys = append(keys, key{fmt.Sprintf("%s%d", pStats, i), sTotal}.av())
	}
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var c struct {
			Deposited  int64 `dynamodbav:"money_deposited"`
			Granted    int64 `dynamodbav:"money_granted"`
			Recognized int64 `dynamodbav:"money_recognized"`
			Earned     int64 `dynamodbav:"money_earned"`
			PaidOut    int64 `dynamodbav:"money_paid_out"`
		}
		if err := unmarshal(item, &c); err != nil {
			return err
		}
		m = m.Add(store.Money(c))
		return nil
	})
	if err != nil {
		return store.Money{}, fmt.Errorf("dynamo: money totals: %w", err)
	}
	return m, nil
}

// batchGet reads keys (at most 100) consistently and calls fn for each item
// found. A batch may come back partly processed under load: the rest is
// asked for again after a backoff until none is left.
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, fn func(map[string]types.AttributeValue) error) error {
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	wait := conflictBaseWait
	for try := 0; len(req) > 0; try++ {
		if try > 0 {
			if err := sleep(ctx, &wait); err != nil {
				return err
			}
		}
		out, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return err
		}
		for _, item := range out.Responses[s.table] {
			if err := fn(item); err != nil {
				return err
			}
		}
		req = out.UnprocessedKeys
	}
	return nil
}

// batchGetListed reads the items of ids, a listing's, 100 a batch, with the
// key keyOf gives each, and returns what decode makes of them (with the id
// it finds in each) in the order of ids. An id without an item is an error:
// a listing and its records are written together.
func batchGetListed[T any](ctx context.Context, s *Store, what string, ids []string, keyOf func(string) key,
	decode func(map[string]types.AttributeValue) (id string, v T, err error)) ([]T, error) {
	found := make(map[string]T, len(ids))
	for chunk := range slices.Chunk(ids, maxBatchGet) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, id := range chunk {
			keys[i] = keyOf(id).av()
		}
		err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
			id, v, err := decode(item)
			found[id] = v
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]T, 0, len(ids))
	for _, id := range ids {
		v, ok := found[id]
		if !ok {
			return nil, fmt.Errorf("listed %s %s has no record", what, id)
		}
		out = append(out, v)
	}
	return out, nil
}
