package dynamo_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// throttling cancels the first n transactions the way DynamoDB does when an
// item's partition is throttled; DynamoDB Local never throttles.
type throttling struct {
	*dynamodb.Client
	left atomic.Int64
}

func (c *throttling) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if c.left.Add(-1) >= 0 {
		reasons := make([]types.CancellationReason, len(in.TransactItems))
		for i := range reasons {
			reasons[i].Code = aws.String("None")
		}
		reasons[0].Code = aws.String("ThrottlingError")
		return nil, &types.TransactionCanceledException{Message: aws.String("throttled"), CancellationReasons: reasons}
	}
	return c.Client.TransactWriteItems(ctx, in, o...)
}

func TestThrottledTransactionIsRetried(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	seed(t, dynamo.New(c, table))
	th := &throttling{Client: c}
	th.left.Store(3)
	s := dynamo.New(th, table)
	err := s.Complete(bg, store.Completion{JobID: "running", Worker: "w1", CompletionTokens: 9, Earning: 7, At: t0})
	if err != nil {
		t.Fatalf("Complete after 3 throttled tries: %v", err)
	}
	if j, _ := s.GetJob(bg, "running"); j.State != store.JobDone {
		t.Errorf("job %s, want done", j.State)
	}
	if a, _ := s.GetAccount(bg, "wa"); a.Earned != 7 {
		t.Errorf("earned %d, want 7", a.Earned)
	}
}

// lostReply sends each conditional put twice, as the SDK does when the
// first reply is lost on the way back: the second finds the first's item.
type lostReply struct{ *dynamodb.Client }

func (c lostReply) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := c.Client.PutItem(ctx, in, o...); err != nil {
		return nil, err
	}
	return c.Client.PutItem(ctx, in, o...)
}

func TestRetriedCreateIsNotAConflict(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	s := dynamo.New(lostReply{c}, table, dynamo.WithClock(func() time.Time { return t0 }))
	if err := s.CreateAccount(bg, store.Account{ID: "a", Credits: 5, CreatedAt: t0}); err != nil {
		t.Errorf("CreateAccount whose first reply was lost: %v", err)
	}
	if err := s.UseNonce(bg, "n", t0.Add(time.Minute)); err != nil {
		t.Errorf("UseNonce whose first reply was lost: %v (a connect refused as a replay)", err)
	}
	// Someone else's earlier write is still a conflict.
	plain := dynamo.New(c, table, dynamo.WithClock(func() time.Time { return t0 }))
	if err := plain.CreateAccount(bg, store.Account{ID: "a", CreatedAt: t0}); !errors.Is(err, store.ErrExists) {
		t.Errorf("second CreateAccount: %v, want ErrExists", err)
	}
	if err := plain.UseNonce(bg, "n", t0.Add(time.Minute)); !errors.Is(err, store.ErrExists) {
		t.Errorf("replayed nonce: %v, want ErrExists", err)
	}
}

// TestExpiredWorkerIsGone: a worker record past its TTL (a connection whose
// $disconnect never arrived) is neither listed nor assigned, though
// DynamoDB deletes it only later.
func TestExpiredWorkerIsGone(t *testing.T) {
	c := dynamotest.Client(t)
	table := dynamotest.Table(t, c)
	seed(t, dynamo.New(c, table, dynamo.WithClock(func() time.Time { return t0 })))
	later := dynamo.New(c, table, dynamo.WithClock(func() time.Time { return t0.Add(4 * time.Hour) }))
	if ws, err := later.IdleWorkers(bg, "m"); err != nil || len(ws) != 0 {
		t.Errorf("idle workers 4 h later: %v, %v; want none", ws, err)
	}
	if _, err := later.Assign(bg, "queued", "w2", t0.Add(4*time.Hour)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Assign to an expired worker: %v, want ErrNotFound", err)
	}
}
