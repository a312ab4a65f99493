package dynamo

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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

// Stats implements store.Store from counters, never a scan: the completion
// totals and the last full minute's tokens (statShards × 2 items), the
// queued jobs by model (statShards QUEUE items), and the connected and
// registered workers (the online count items of the workers whose records
// have not expired by the store's clock; see onlineCountItem). Two
// BatchGetItem calls, in parallel.
func (s *Store) Stats(ctx context.Context, now time.Time) (store.Stats, error) {
	st := store.Stats{WorkersByModel: map[string]int64{}, QueueByModel: map[string]int64{}, RecentModels: map[string]bool{}}
	lastFull := sMinute + timeKey(now.Truncate(time.Minute).Add(-time.Minute))
	totals := make([]map[string]types.AttributeValue, 0, 3*statShards)
	for i := range statShards {
		p := fmt.Sprintf("%s%d", pStats, i)
		totals = append(totals, key{p, sTotal}.av(), key{p, lastFull}.av(), key{p, sQueued}.av())
	}
	var online []map[string]types.AttributeValue
	for _, b := range liveBuckets(s.now()) {
		for i := range onlineShards {
			online = append(online, key{fmt.Sprintf("%s%d", pStats, i), onlineSortKey(b)}.av())
		}
	}
	var mu sync.Mutex // the two reads add up in st
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		errs[0] = s.batchGet(ctx, totals, func(item map[string]types.AttributeValue) error {
			var c struct {
				SK     string `dynamodbav:"sk"`
				Jobs   int64  `dynamodbav:"jobs"`
				Tokens int64  `dynamodbav:"tokens"`
			}
			if err := unmarshal(item, &c); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			switch c.SK {
			case sTotal:
				st.JobsCompleted += c.Jobs
				st.TokensServed += c.Tokens
			case sQueued:
				return addCounts(item, st.QueueByModel, nil)
			default:
				st.TokensLastMinute += c.Tokens
			}
			return nil
		})
	})
	wg.Go(func() {
		errs[1] = s.batchGet(ctx, online, func(item map[string]types.AttributeValue) error {
			mu.Lock()
			defer mu.Unlock()
			for name := range item {
				// A count at zero is a worker that left: its bucket
				// is read for an hour at least after it left (a
				// connection rolls within two of its three-hour TTL).
				if m, ok := strings.CutPrefix(name, countPrefix); ok {
					st.RecentModels[m] = true
				}
			}
			return addCounts(item, st.WorkersByModel, &st.WorkersOnline)
		})
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return store.Stats{}, fmt.Errorf("dynamo: stats: %w", err)
	}
	// Each count is exact in sum, not per item (a decrement may land on
	// an item whose increment predates the counters), so only the sums
	// are judged: a model at zero or below has nothing to show.
	for _, m := range []map[string]int64{st.QueueByModel, st.WorkersByModel} {
		maps.DeleteFunc(m, func(_ string, n int64) bool { return n <= 0 })
	}
	st.WorkersOnline = max(st.WorkersOnline, 0)
	return st, nil
}

// The per-model counts (queued jobs, registered workers) are attributes of
// their count items named countPrefix + the model id; connected workers
// are aConnected of the online count items.
const (
	countPrefix = "m#"
	aConnected  = "connected"
)

// Tuning of the worker counts.
const (
	// onlineShards spreads the online count items: each connect,
	// registration and disconnect adds to one, chosen by connection.
	// Connections change far less often than jobs, so fewer than
	// statShards; Stats reads onlineShards items per live bucket.
	onlineShards = 8
	// onlineBucket is the span of record expiry times one online count
	// item covers. A worker is counted in the bucket of its record's TTL,
	// which PutWorker sets (connectionTTL after the connect) and nothing
	// changes, so its connect, registrations and disconnect count in the
	// same item; Stats reads the buckets whose records may not have
	// expired yet. So a connection whose $disconnect never came, which
	// every other reader stops seeing when its record expires, stops
	// counting by the end of its bucket: at most an hour late.
	onlineBucket = time.Hour
)

// bucketOf is the online count bucket of a record expiring at the epoch
// second ttl: the start of its onlineBucket, in epoch seconds.
func bucketOf(ttl int64) int64 {
	span := int64(onlineBucket / time.Second)
	return ttl - ttl%span
}

// onlineSortKey is the sort key of the online count items of a bucket.
func onlineSortKey(bucket int64) string { return fmt.Sprintf("%s%d", sOnline, bucket) }

// liveBuckets are the buckets of the records that may be unexpired at now:
// from now's to that of a record written now.
func liveBuckets(now time.Time) []int64 {
	var out []int64
	for b := bucketOf(ttl(now)); b <= bucketOf(ttl(now.Add(connectionTTL))); b += int64(onlineBucket / time.Second) {
		out = append(out, b)
	}
	return out
}

// addCounts adds a count item's per-model counts to byModel and, when
// connected is set, its connected count there.
func addCounts(item map[string]types.AttributeValue, byModel map[string]int64, connected *int64) error {
	for name, v := range item {
		model, isModel := strings.CutPrefix(name, countPrefix)
		if !isModel && (connected == nil || name != aConnected) {
			continue
		}
		var n int64
		if err := attributevalue.Unmarshal(v, &n); err != nil {
			return fmt.Errorf("decode count %s: %w", name, err)
		}
		if isModel {
			byModel[model] += n
		} else {
			*connected += n
		}
	}
	return nil
}

// countAdds builds "ADD" clauses that add each of deltas (by model; zero
// left out) and, when non-zero, connected: the names and values they use.
// Placeholders are short, so that a worker registering maxModels models in
// place of as many others stays within DynamoDB's 4 KB expression limit.
func countAdds(deltas map[string]int64, connected int64) (clauses []string, n map[string]string, v values) {
	n, v = map[string]string{}, values{}
	models := slices.Sorted(maps.Keys(deltas)) // a stable expression
	for i, m := range models {
		d := deltas[m]
		if d == 0 {
			continue
		}
		name, val := "#"+strconv.FormatInt(int64(i), 36), ":"+strconv.FormatInt(d, 36)
		if d < 0 {
			val = ":n" + strconv.FormatInt(-d, 36)
		}
		clauses = append(clauses, name+" "+val)
		n[name], v[val] = countPrefix+m, num(d)
	}
	if connected != 0 {
		clauses = append(clauses, "#connected :connected")
		n["#connected"], v[":connected"] = aConnected, num(connected)
	}
	return clauses, n, v
}

// queueCountItem adds delta to the queued count of job's model, on the
// job's stats shard: Admit and Requeue add one, Assign and Fail (of a
// queued job) take it away, each in the transaction whose conditions make
// the job's state change happen once. No condition of its own.
func (s *Store) queueCountItem(job store.Job, delta int64) types.TransactWriteItem {
	clauses, n, v := countAdds(map[string]int64{job.Model: delta}, 0)
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key:              key{fmt.Sprintf("%s%d", pStats, shard(job.ID, statShards)), sQueued}.av(),
		UpdateExpression: aws.String("ADD " + strings.Join(clauses, ",")), ExpressionAttributeNames: n, ExpressionAttributeValues: v}}
}

// onlineCountItem adds connected and the per-model deltas to the online
// count item of the worker conn whose record expires at the epoch second
// expires (its TTL); nil when there is nothing to add. The item expires an
// hour after its bucket: Stats no longer reads it by then. No condition of
// its own: the worker's record, in the same transaction, has those.
func (s *Store) onlineCountItem(conn string, expires, connected int64, deltas map[string]int64) *types.TransactWriteItem {
	clauses, n, v := countAdds(deltas, connected)
	if len(clauses) == 0 {
		return nil
	}
	b := bucketOf(expires)
	n["#"+schema.TTL], v[":ttl"] = schema.TTL, num(b+2*int64(onlineBucket/time.Second))
	return &types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key:                      key{fmt.Sprintf("%s%d", pStats, shard(conn, onlineShards)), onlineSortKey(b)}.av(),
		UpdateExpression:         aws.String("ADD " + strings.Join(clauses, ",") + " SET #" + schema.TTL + " = :ttl"),
		ExpressionAttributeNames: n, ExpressionAttributeValues: v}}
}

// registeredDeltas is what a worker's registration state adds to the
// per-model counts: one per distinct model it serves while registered,
// times sign.
func registeredDeltas(registered bool, models []string, sign int64, into map[string]int64) map[string]int64 {
	if into == nil {
		into = map[string]int64{}
	}
	if !registered {
		return into
	}
	seen := make(map[string]bool, len(models))
	for _, m := range models {
		if !seen[m] {
			seen[m] = true
			into[m] += sign
		}
	}
	return into
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
