package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// errCrash is what the fault injector returns in place of the process dying.
var errCrash = errors.New("injected crash")

// crashing is a client that "crashes" at its n-th write: before sending it
// (the write never happens) or after (it happened, but its reply is lost,
// like a process killed while waiting). Every later call fails too, as
// nothing runs after a crash.
type crashing struct {
	*dynamodb.Client
	at     int64 // the write to crash at, from 1; 0 never
	after  bool  // crash after the write reached the database
	writes atomic.Int64
}

func (c *crashing) write(ctx context.Context, do func() error) error {
	n := c.writes.Add(1)
	switch {
	case c.at == 0 || n < c.at:
		return do()
	case n == c.at && c.after:
		if err := do(); err != nil {
			return err
		}
		return errCrash
	default:
		return errCrash
	}
}

func (c *crashing) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.PutItemOutput, err error) {
	err = c.write(ctx, func() (e error) { out, e = c.Client.PutItem(ctx, in, o...); return e })
	return out, err
}

func (c *crashing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.UpdateItemOutput, err error) {
	err = c.write(ctx, func() (e error) { out, e = c.Client.UpdateItem(ctx, in, o...); return e })
	return out, err
}

func (c *crashing) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (out *dynamodb.DeleteItemOutput, err error) {
	err = c.write(ctx, func() (e error) { out, e = c.Client.DeleteItem(ctx, in, o...); return e })
	return out, err
}

func (c *crashing) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (out *dynamodb.TransactWriteItemsOutput, err error) {
	err = c.write(ctx, func() (e error) { out, e = c.Client.TransactWriteItems(ctx, in, o...); return e })
	return out, err
}

var (
	t0  = time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	bg  = context.Background()
	req = func(id string) store.AdmitRequest {
		return store.AdmitRequest{KeyHash: "kh", Window: t0.Truncate(time.Minute), Limit: 100,
			Job: store.Job{ID: id, Model: "m", Price: 10, Listener: "l1", Created: t0}}
	}
	// limitedReq admits on the key with a daily spend limit, saying
	// whose job it is (as the API does: Admit reads nothing first).
	limitedReq = func(id string) store.AdmitRequest {
		r := req(id)
		r.KeyHash, r.Job.AccountID = "kl", "a"
		return r
	}
)

// seed is the state every operation starts from: a paying account with an
// allowance, a key and a key with a daily spend limit, a worker account
// with a token, two registered idle workers, a queued job, a job assigned
// to w1, a queued job on the limited key and a deposit intent.
func seed(t *testing.T, s store.Store) {
	t.Helper()
	steps := []error{
		s.CreateAccount(bg, store.Account{ID: "a", Credits: 100, FreeAllowanceLeft: 4, CreatedAt: t0}),
		s.CreateAccount(bg, store.Account{ID: "wa", CreatedAt: t0}),
		s.PutAPIKey(bg, store.Secret{Hash: "kh", ID: "k1", AccountID: "a", CreatedAt: t0}),
		s.PutAPIKey(bg, store.Secret{Hash: "kl", ID: "kl1", AccountID: "a", CreatedAt: t0, Name: "capped",
			Limit: 50, LimitReset: store.ResetDaily}),
		s.PutWorkerToken(bg, store.Secret{Hash: "th", ID: "t1", AccountID: "wa", CreatedAt: t0}),
		s.PutWorker(bg, store.Worker{Conn: "w1", AccountID: "wa", TokenHash: "th", Pubkey: "pk1", ConnectedAt: t0}),
		s.PutWorker(bg, store.Worker{Conn: "w2", AccountID: "wa", TokenHash: "th", Pubkey: "pk2", ConnectedAt: t0}),
		s.PutDeposit(bg, store.Deposit{ID: "d1", AccountID: "a", Reference: "ref1", Created: t0}),
	}
	for _, c := range []string{"w1", "w2"} {
		_, err := s.RegisterWorker(bg, c, []string{"m"}, nil)
		steps = append(steps, err)
	}
	_, err := s.Admit(bg, req("queued"))
	steps = append(steps, err)
	_, err = s.Admit(bg, req("running"))
	steps = append(steps, err)
	_, err = s.Assign(bg, "running", "w1", t0)
	steps = append(steps, err)
	_, err = s.Admit(bg, limitedReq("limited"))
	steps = append(steps, err)
	if err := errors.Join(steps...); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// snapshot is every item of the table, in key order, as JSON, without the
// per-call tokens of conditional creates.
func snapshot(t *testing.T, c *dynamodb.Client, table string) []string {
	t.Helper()
	out := dynamotest.Items(t, c, table, "call_token") // random per call, by design
	slices.Sort(out)
	return out
}

// TestCrashAtEveryWrite runs each multi-record operation, crashing at each
// of its writes in turn (before the write, and after it with the reply
// lost), then runs it again from a fresh process as a retry would. The
// table must end exactly as after one clean run: no credit moved twice, no
// state left half-changed, no ledger entry missing or written twice. The retry may report that the work was done
// already (ErrExists, ErrConflict); it must not do it again.
func TestCrashAtEveryWrite(t *testing.T) {
	c := dynamotest.Client(t)
	// The store's clock is fixed, as it times the ledger entries of the
	// moves that take no time (a grant, an allowance, a payout).
	clock := dynamo.WithClock(func() time.Time { return t0 })
	complete := func(s store.Store) error {
		return s.Complete(bg, store.Completion{JobID: "running", Worker: "w1", PromptTokens: 5,
			CompletionTokens: 20, MilliTokPerSec: 40_000, Earning: 7, At: t0.Add(time.Second),
			Receipt: &store.Receipt{JobID: "running", WorkerPubkey: "pk1", Model: "m", RequestSHA256: "r",
				OutputSHA256: "o", Deltas: 20, PromptTokens: 5, CompletionTokens: 20, TotalMillis: 9, Signature: "s"}})
	}
	ops := []struct {
		name string
		op   func(s store.Store) error
	}{
		{"Grant", func(s store.Store) error { _, err := s.Grant(bg, "a", 50, "deposit-sig-1", true); return err }},
		{"PutDeposit", func(s store.Store) error {
			return s.PutDeposit(bg, store.Deposit{ID: "d2", AccountID: "a", Reference: "ref2", Created: t0.Add(time.Second)})
		}},
		{"PutDepositX402", func(s store.Store) error {
			return s.PutDeposit(bg, store.Deposit{ID: "x402_sig", AccountID: "a", Kind: store.DepositX402, Reference: "sig",
				AmountUSDC: 1_000_000, Created: t0.Add(time.Second)})
		}},
		{"CreditDeposit", func(s store.Store) error {
			_, _, err := s.CreditDeposit(bg, store.DepositCredit{DepositID: "d1", AccountID: "a", Signature: "deposit-sig-2",
				USDC: 2_000_000, Credits: 200, At: t0.Add(time.Second)})
			return err
		}},
		{"Admit", func(s store.Store) error { _, err := s.Admit(bg, req("new")); return err }},
		{"AdmitLimited", func(s store.Store) error { _, err := s.Admit(bg, limitedReq("new")); return err }},
		{"AdmitAssign", func(s store.Store) error {
			// The idle list makes w2 known, as a dispatcher's read does.
			if _, err := s.IdleWorkers(bg, "m"); err != nil {
				return err
			}
			_, _, err := s.(*dynamo.Store).AdmitAssign(bg, req("new"), "w2")
			return err
		}},
		{"FailRefundLimited", func(s store.Store) error {
			_, err := s.Fail(bg, "limited", "queue_timeout", true, t0.Add(time.Second))
			return err
		}},
		{"UpdateAPIKey", func(s store.Store) error {
			_, err := s.UpdateAPIKey(bg, "a", "kl1", store.KeyPatch{Name: new("renamed"), Limit: new(int64(0))})
			return err
		}},
		{"RenameWorkerToken", func(s store.Store) error {
			_, err := s.RenameWorkerToken(bg, "wa", "t1", "rack")
			return err
		}},
		{"Assign", func(s store.Store) error { _, err := s.Assign(bg, "queued", "w2", t0.Add(time.Second)); return err }},
		{"Requeue", func(s store.Store) error { _, err := s.Requeue(bg, "running", "w1", t0.Add(time.Second)); return err }},
		{"Complete", complete},
		{"CompleteThenPayout", func(s store.Store) error {
			if err := complete(s); err != nil {
				return err
			}
			_, err := s.(store.Earnings).AdjustPaidOut(bg, "wa", 5, "payout-1")
			return err
		}},
		{"SetDailyAllowance", func(s store.Store) error {
			_, err := s.(store.Ledger).SetDailyAllowance(bg, "a", "2031-03-14", 9)
			return err
		}},
		{"FailRefund", func(s store.Store) error {
			_, err := s.Fail(bg, "running", "worker_lost", true, t0.Add(time.Second))
			return err
		}},
		{"FailQueued", func(s store.Store) error {
			_, err := s.Fail(bg, "queued", "queue_timeout", true, t0.Add(time.Second))
			return err
		}},
		{"PutAPIKey", func(s store.Store) error {
			return s.PutAPIKey(bg, store.Secret{Hash: "kh2", ID: "k2", AccountID: "a", CreatedAt: t0.Add(time.Second)})
		}},
		{"RevokeAPIKey", func(s store.Store) error { return s.RevokeAPIKey(bg, "a", "k1", t0.Add(time.Second)) }},
		{"RevokeWorkerToken", func(s store.Store) error {
			_, err := s.RevokeWorkerToken(bg, "wa", "t1", t0.Add(time.Second))
			return err
		}},
		{"PutWorker", func(s store.Store) error {
			return s.PutWorker(bg, store.Worker{Conn: "w3", AccountID: "wa", TokenHash: "th", Pubkey: "pk3", ConnectedAt: t0})
		}},
		{"JudgeRejected", func(s store.Store) error {
			_, err := s.Judge(bg, store.Verdict{JobID: "running", Conn: "w1", Pubkey: "pk1", AccountID: "wa", TokenHash: "th",
				Kind: store.VerdictRejected, Strikes: store.ProofStrikes, Reason: "receipt_mismatch", At: t0})
			return err
		}},
		{"JudgeCanaryPassed", func(s store.Store) error {
			_, err := s.Judge(bg, store.Verdict{JobID: "running", Conn: "w1", Pubkey: "pk1", AccountID: "wa", TokenHash: "th",
				Kind: store.VerdictCanaryPassed, Earning: 3, At: t0})
			return err
		}},
		{"RegisterWorker", func(s store.Store) error {
			_, err := s.RegisterWorker(bg, "w2", []string{"m", "m2"}, map[string]store.Caps{"m2": {Tools: true, Context: 4096}})
			return err
		}},
		{"DeleteWorker", func(s store.Store) error { _, err := s.DeleteWorker(bg, "w1"); return err }},
		{"UseNonce", func(s store.Store) error { return s.UseNonce(bg, "n1", t0.Add(time.Minute)) }},
	}
	done := func(err error) bool {
		return err == nil || errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrConflict)
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			// The reference: one clean run, counting its writes.
			table := dynamotest.Table(t, c)
			seed(t, dynamo.New(c, table, clock))
			counter := &crashing{Client: c}
			if err := o.op(dynamo.New(counter, table, clock)); err != nil {
				t.Fatalf("clean run: %v", err)
			}
			want := snapshot(t, c, table)
			writes := counter.writes.Load()
			if writes == 0 {
				t.Fatal("the operation wrote nothing")
			}
			for at := int64(1); at <= writes; at++ {
				for _, after := range []bool{false, true} {
					t.Run(fmt.Sprintf("write%d/after=%v", at, after), func(t *testing.T) {
						table := dynamotest.Table(t, c)
						seed(t, dynamo.New(c, table, clock))
						err := o.op(dynamo.New(&crashing{Client: c, at: at, after: after}, table, clock))
						if !errors.Is(err, errCrash) {
							t.Fatalf("crashed run returned %v, want the crash", err)
						}
						err = o.op(dynamo.New(c, table, clock))
						if o.name == "DeleteWorker" && errors.Is(err, store.ErrNotFound) {
							err = nil // deleted by the crashed run
						}
						if !done(err) {
							t.Fatalf("retry: %v", err)
						}
						if got := snapshot(t, c, table); !slices.Equal(got, want) {
							t.Errorf("after crash and retry the table differs from one clean run:\n got  %v\n want %v", got, want)
						}
					})
				}
			}
		})
	}
}
