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

// maxStaleRetries bounds how often one call rebuilds its write after a
// condition showed that what it knew was stale. Each retry starts from the
// item as the failed condition returned it, so more than a couple means
// other writers keep changing the record; the caller then sees the conflict.
const maxStaleRetries = 8

// values is shorthand for ExpressionAttributeValues.
type values = map[string]types.AttributeValue

// The items of Admit's transaction, in order; a cancellation's reasons are
// indexed the same way.
const (
	admitKey         = iota // the API key: exists, not revoked, this account's, not expired, within its limit; counts the spend
	admitJob                // the job: a new id
	admitKeyRate            // the key's window: below Limit
	admitAccountRate        // the account's window: below AccountLimit
	admitAccount            // the account: pays, with the allowance the split assumed
	// then, for a job priced above 0, the charge's ledger entry: new
)

// Admit implements store.Store in one transaction: the key must be active,
// the account's, unexpired and within its spend limit, the job id new, the
// key's and the account's rate windows below their limits and the balance
// enough. The split of the price between allowance and credits depends on
// the allowance, which the write must know: it uses the allowance last
// seen for the account (none, for most accounts), conditions on it, and if
// that was stale the failed condition returns the account as it is and the
// second try is exact. The key's spend is written the same way, from its
// limit, reset and period last seen (see chargeKeyItem). The charge's
// ledger entry is one more item of the transaction, not a round trip.
//
// A transaction returns nothing when it succeeds, and reading the windows
// back would add a round trip to the hot path, so the counts reported are
// the requests this process admitted in each window: exact while one
// process serves a key (the dev stack, a single host), a lower bound when
// several do. The limits themselves are exact either way: they are
// conditions of the write.
func (s *Store) Admit(ctx context.Context, r store.AdmitRequest) (store.Admission, error) {
	adm, _, err := s.admit(ctx, r, "")
	return adm, err
}

// AdmitAssign is Admit and Assign of the admitted job to worker conn in one
// transaction: the request path's one round trip when a worker is idle at
// admission (dispatch.AdmitAssigner). Its refusals are Admit's, and a stale
// hint is corrected and tried again as Admit does. If only the worker's
// claim fails (the worker taken, gone or changed), or this process does not
// know the worker (its idle list came from elsewhere), the job is admitted
// queued, as by Admit, and assigned is false. The job is counted neither
// into the queue nor out of it (Admit's +1 and Assign's -1).
func (s *Store) AdmitAssign(ctx context.Context, r store.AdmitRequest, conn string) (adm store.Admission, assigned bool, err error) {
	return s.admit(ctx, r, conn)
}

// admit is Admit, with the claim of worker conn in the same transaction
// when conn is known here (AdmitAssign).
func (s *Store) admit(ctx context.Context, r store.AdmitRequest, conn string) (store.Admission, bool, error) {
	if r.Job.ID == "" {
		return store.Admission{}, false, errors.New("dynamo: admit: empty job id")
	}
	fail := func(err error) (store.Admission, bool, error) {
		return store.Admission{}, false, fmt.Errorf("dynamo: admit job %s: %w", r.Job.ID, err)
	}
	a, err := s.newAdmission(ctx, r)
	if err != nil {
		return fail(err)
	}
	var who workerIdentity
	claim := false
	if conn != "" {
		who, claim = s.hints.worker(conn)
	}
	for try := 0; ; try++ {
		if claim {
			a.job.State, a.job.Worker, a.job.WorkerAccount, a.job.WorkerPubkey, a.job.Attempts = store.JobAssigned, conn, who.account, who.pubkey, 1
		} else {
			a.job.State, a.job.Worker, a.job.WorkerAccount, a.job.WorkerPubkey, a.job.Attempts = store.JobQueued, "", "", "", 0
		}
		items, err := a.items(s)
		if err != nil {
			return fail(err)
		}
		// Last, after the items above (whose indexes the cancellation
		// reasons follow): the worker's claim, or, queued, the count.
		claimAt := len(items)
		if claim {
			items = append(items, s.claimWorkerItem(conn, a.job, who))
		} else {
			items = append(items, s.queueCountItem(a.job, 1))
		}
		err = s.transact(ctx, items)
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			return a.done(s), claim, nil
		}
		switch {
		case tf.failed(admitKey):
			// Refused, or what this process knew of the key's spend
			// was stale: the key as it is says which.
			a.spend, err = chargeRefused(tf.old(admitKey), a.accountID, a.job)
			s.hints.setKey(r.KeyHash, a.spend)
			if err != nil {
				return fail(err)
			}
			if tf.failed(admitAccount) && tf.old(admitAccount) != nil {
				// Learn the allowance too, or the next try fails there.
				var acc accountItem
				if err := unmarshal(tf.old(admitAccount), &acc); err != nil {
					return fail(err)
				}
				a.allowance = acc.Allowance
			}
			if try >= maxStaleRetries {
				return fail(fmt.Errorf("api key keeps changing: %w", store.ErrConflict))
			}
		case tf.failed(admitJob):
			return fail(fmt.Errorf("job: %w", store.ErrExists))
		case tf.failed(admitKeyRate):
			return fail(fmt.Errorf("api key: %d of %d requests in window: %w",
				windowCount(tf.old(admitKeyRate)), r.Limit, store.ErrRateLimited))
		case tf.failed(admitAccountRate):
			return fail(fmt.Errorf("account %s: %d of %d requests in window: %w",
				a.accountID, windowCount(tf.old(admitAccountRate)), r.AccountLimit, store.ErrRateLimited))
		case tf.failed(admitAccount):
			old := tf.old(admitAccount)
			if old == nil {
				return fail(fmt.Errorf("account %s: %w", a.accountID, store.ErrNotFound))
			}
			var acc accountItem
			if err := unmarshal(old, &acc); err != nil {
				return fail(err)
			}
			a.allowance = acc.Allowance
			s.hints.setAllowance(a.accountID, a.allowance)
			fa := min(max(acc.Allowance, 0), a.job.Price)
			if a.job.Price-fa > acc.Credits {
				return fail(fmt.Errorf("account %s: price %d, allowance %d, credits %d: %w",
					a.accountID, a.job.Price, acc.Allowance, acc.Credits, store.ErrInsufficientCredits))
			}
			if try >= maxStaleRetries {
				return fail(fmt.Errorf("account %s keeps changing: %w", a.accountID, store.ErrConflict))
			}
		case claim && tf.failed(claimAt):
			// Only the worker's condition failed: it was taken, left or
			// is not what this process knew. The job is admitted queued;
			// what the worker is now is remembered for the next claim.
			if old := tf.old(claimAt); old != nil {
				var it workerItem
				if err := unmarshal(old, &it); err == nil {
					s.hints.setWorker(it.worker())
				}
			}
			claim = false
		default:
			return fail(tf)
		}
	}
}

// admission is one Admit in the making: the job as it will be stored and
// what this process knows of the account's allowance and the key's spend,
// which the transaction's conditions pin (a failed try corrects them).
type admission struct {
	r           store.AdmitRequest
	job         store.Job
	accountID   string
	allowance   int64
	spend       keySpend
	accountRate *types.Update
}

// newAdmission checks r and prepares its admission; the account comes from
// the key (one read) when r.Job does not name it.
func (s *Store) newAdmission(ctx context.Context, r store.AdmitRequest) (*admission, error) {
	in := r.Job
	if in.Price < 0 {
		return nil, fmt.Errorf("negative price %d", in.Price)
	}
	if r.AccountLimit < 0 {
		return nil, fmt.Errorf("negative account limit %d", r.AccountLimit)
	}
	if r.Limit <= 0 { // no request fits in the window (as the embedded store says)
		return nil, fmt.Errorf("limit %d: %w", r.Limit, store.ErrRateLimited)
	}
	accountID := in.AccountID
	if accountID == "" {
		// The caller did not say whose job it is: one more read.
		key, err := s.getSecret(ctx, apiKeys, r.KeyHash)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("api key: %w", store.ErrNotFound)
		} else if err != nil {
			return nil, err
		}
		accountID = key.AccountID
	}
	job := store.Job{ID: in.ID, AccountID: accountID, Model: in.Model, Price: in.Price,
		State: store.JobQueued, Listener: in.Listener, Created: in.Created, Updated: in.Updated,
		Canary: in.Canary, Target: in.Target, Needs: in.Needs, KeyHash: r.KeyHash}
	if job.Updated.IsZero() {
		job.Updated = job.Created
	}
	// The account's window is counted even without a cap, so that the
	// count is right the moment a cap is set.
	accountRate := &types.Update{TableName: s.tableName(), Key: accountRateKey(accountID, r.Window).av(),
		UpdateExpression:          aws.String("SET #count = if_not_exists(#count, :zero) + :one, #ttl = :ttl"),
		ExpressionAttributeNames:  names(aCount, schema.TTL),
		ExpressionAttributeValues: values{":zero": num(0), ":one": num(1), ":ttl": num(ttl(r.Window.Add(rateWindowTTL)))}}
	if r.AccountLimit > 0 {
		accountRate.ConditionExpression = aws.String("attribute_not_exists(#count) OR #count < :limit")
		accountRate.ExpressionAttributeValues[":limit"] = num(r.AccountLimit)
		accountRate.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return &admission{r: r, job: job, accountID: accountID, allowance: s.hints.allowance(accountID),
		spend: s.hints.key(r.KeyHash), accountRate: accountRate}, nil
}

// items are the admission's transaction items (indexed admitKey ..., then
// the ledger entry), with the allowance and credits split as this process
// knows the account.
func (a *admission) items(s *Store) ([]types.TransactWriteItem, error) {
	r, job := a.r, &a.job
	job.FromAllowance = min(max(a.allowance, 0), job.Price)
	fromCredits := job.Price - job.FromAllowance
	jobItem, err := marshal(toJobItem(*job))
	if err != nil {
		return nil, err
	}
	// The allowance condition pins the split computed above.
	allowanceCond := ""
	switch {
	case job.Price == 0:
	case job.FromAllowance == job.Price:
		allowanceCond = " AND #allowance >= :price"
	case job.FromAllowance == 0:
		allowanceCond = " AND #allowance <= :zero"
	default:
		allowanceCond = " AND #allowance = :fa"
	}
	v := values{":fa": num(job.FromAllowance), ":fc": num(fromCredits), ":price": num(job.Price)}
	if job.FromAllowance == 0 && job.Price > 0 {
		v[":zero"] = num(0)
	}
	charge, chargeNames := "SET #credits = #credits - :fc, #allowance = #allowance - :fa, #spent = #spent + :price", names(aCredits, aAllowance, aSpent)
	if job.Price > 0 {
		// A request that costs something makes the account active.
		charge += ", #last_request = :created"
		chargeNames["#"+aLastReq], v[":created"] = aLastReq, num(nanos(job.Created))
	}
	return s.withEntry([]types.TransactWriteItem{
		admitKey: s.chargeKeyItem(r.KeyHash, a.accountID, *job, a.spend),
		admitJob: {Put: &types.Put{TableName: s.tableName(), Item: jobItem, ConditionExpression: notExists}},
		admitKeyRate: {Update: &types.Update{TableName: s.tableName(), Key: rateKey(r.KeyHash, r.Window).av(),
			UpdateExpression:                    aws.String("SET #count = if_not_exists(#count, :zero) + :one, #ttl = :ttl"),
			ConditionExpression:                 aws.String("attribute_not_exists(#count) OR #count < :limit"),
			ExpressionAttributeNames:            names(aCount, schema.TTL),
			ExpressionAttributeValues:           values{":zero": num(0), ":one": num(1), ":limit": num(r.Limit), ":ttl": num(ttl(r.Window.Add(rateWindowTTL)))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		admitAccountRate: {Update: a.accountRate},
		admitAccount: {Update: &types.Update{TableName: s.tableName(), Key: accountKey(a.accountID).av(),
			UpdateExpression:                    aws.String(charge),
			ConditionExpression:                 aws.String("attribute_exists(pk) AND #credits >= :fc" + allowanceCond),
			ExpressionAttributeNames:            chargeNames,
			ExpressionAttributeValues:           v,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}, store.ChargeEntry(*job)), nil
}

// done records in the hints what the committed admission changed and
// returns it.
func (a *admission) done(s *Store) store.Admission {
	s.hints.setAllowance(a.accountID, a.allowance-a.job.FromAllowance)
	a.spend.period = store.PeriodOf(a.spend.reset, a.job.Created)
	s.hints.setKey(a.r.KeyHash, a.spend)
	s.hints.setJob(a.job)
	return store.Admission{Job: a.job, KeyRequests: s.hints.countAdmitted(rateKey(a.r.KeyHash, a.r.Window)),
		AccountRequests: s.hints.countAdmitted(accountRateKey(a.accountID, a.r.Window))}
}

// windowCount is the count of a rate window's ALL_OLD image, for messages
// only: 0 when it cannot be read.
func windowCount(old map[string]types.AttributeValue) int64 {
	var w struct {
		Count int64 `dynamodbav:"count"`
	}
	_ = unmarshal(old, &w) // the error is what matters, not the figure
	return w.Count
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, id string) (store.Job, error) {
	j, err := s.readJob(ctx, id)
	if err != nil {
		return store.Job{}, fmt.Errorf("dynamo: get job %s: %w", id, err)
	}
	return j, nil
}

// readJob reads a job (consistently) and remembers it.
func (s *Store) readJob(ctx context.Context, id string) (store.Job, error) {
	var it jobItem
	if err := s.get(ctx, jobKey(id), &it); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("job: %w", store.ErrNotFound)
		}
		return store.Job{}, err
	}
	j := it.job()
	s.hints.setJob(j)
	return j, nil
}

// knownJob is the job as this process last saw it, or as it is now.
func (s *Store) knownJob(ctx context.Context, id string) (store.Job, error) {
	if j, ok := s.hints.job(id); ok {
		return j, nil
	}
	return s.readJob(ctx, id)
}

// oldJob decodes the ALL_OLD image of a job whose condition failed and
// remembers it; ErrNotFound if there was no job.
func (s *Store) oldJob(tf *txFailed, i int) (store.Job, error) {
	old := tf.old(i)
	if old == nil {
		return store.Job{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	var it jobItem
	if err := unmarshal(old, &it); err != nil {
		return store.Job{}, err
	}
	j := it.job()
	s.hints.setJob(j)
	return j, nil
}

// QueuedJobs implements store.Store. It reads the model's queue shards of
// the index in parallel, each oldest first, and merges them. The index is
// eventually consistent, so a job assigned a moment ago may still be
// listed: callers take jobs with Assign, whose condition is the truth.
func (s *Store) QueuedJobs(ctx context.Context, model string, limit int) ([]store.Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	parts := make([]string, queueShards)
	for i := range parts {
		parts[i] = fmt.Sprintf("%s%s#%d", gQueue, model, i)
	}
	all, err := firstOfShards(ctx, s, parts, "", limit, func(item map[string]types.AttributeValue) (store.Job, error) {
		var it jobItem
		err := unmarshal(item, &it)
		return it.job(), err
	})
	if err != nil {
		return nil, fmt.Errorf("dynamo: queued jobs for %s: %w", model, err)
	}
	var jobs []store.Job
	for _, j := range all {
		if len(jobs) == limit {
			break
		}
		// The index lags the table: a job this process saw assigned or
		// ended since is not offered again (a dispatcher would spend a
		// failed transaction on it), nor does the stale entry overwrite
		// what this process knows of it.
		if s.hints.freshQueued(j) {
			jobs = append(jobs, j)
		}
	}
	return jobs, nil
}

// Assign implements store.Store: the job (still queued, as many attempts
// as this process knows) and the worker (registered, idle, not draining,
// serving the model, of the account this process knows) change in one
// transaction. The job usually comes from Admit or QueuedJobs and the
// worker's account from IdleWorkers, so the hot path makes no read.
func (s *Store) Assign(ctx context.Context, jobID, conn string, at time.Time) (store.Job, error) {
	fail := func(err error) (store.Job, error) {
		return store.Job{}, fmt.Errorf("dynamo: assign job %s to %s: %w", jobID, conn, err)
	}
	job, err := s.knownJob(ctx, jobID)
	if err != nil {
		return fail(err)
	}
	who, ok := s.hints.worker(conn)
	if !ok {
		w, err := s.GetWorker(ctx, conn)
		if err != nil {
			return fail(err)
		}
		who = workerIdentity{account: w.AccountID, pubkey: w.Pubkey}
	}
	for try := 0; ; try++ {
		if job.State != store.JobQueued {
			if try == 0 { // it may have been requeued since: look again
				if job, err = s.readJob(ctx, jobID); err != nil {
					return fail(err)
				}
			}
			if job.State != store.JobQueued {
				return fail(fmt.Errorf("job is %s: %w", job.State, store.ErrConflict))
			}
		}
		err := s.transact(ctx, []types.TransactWriteItem{
			{Update: &types.Update{TableName: s.tableName(), Key: jobKey(jobID).av(),
				UpdateExpression:                    aws.String("SET #state = :assigned, #worker = :w, #worker_account = :wa, #worker_pubkey = :pk, #attempts = #attempts + :one, #updated = :at REMOVE #gpk, #gsk"),
				ConditionExpression:                 aws.String("#state = :queued AND #attempts = :attempts"),
				ExpressionAttributeNames:            names(aState, aWorker, aWorkerAcc, aWorkerPub, aAttempts, aUpdated, schema.GPK, schema.GSK),
				ExpressionAttributeValues:           values{":assigned": str(string(store.JobAssigned)), ":queued": str(string(store.JobQueued)), ":w": str(conn), ":wa": str(who.account), ":pk": str(who.pubkey), ":one": num(1), ":at": num(nanos(at)), ":attempts": num(int64(job.Attempts))},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
			s.claimWorkerItem(conn, job, who),
			s.queueCountItem(job, -1), // out of the queue, once: the job's condition
		})
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			job.State, job.Worker, job.WorkerAccount, job.WorkerPubkey = store.JobAssigned, conn, who.account, who.pubkey
			job.Attempts++
			job.Updated = at
			s.hints.setJob(job)
			return job, nil
		}
		if tf.failed(0) {
			if job, err = s.oldJob(tf, 0); err != nil {
				return fail(err)
			}
		}
		if tf.failed(1) {
			old := tf.old(1)
			if old == nil {
				return fail(fmt.Errorf("worker %s: %w", conn, store.ErrNotFound))
			}
			var it workerItem
			if err := unmarshal(old, &it); err != nil {
				return fail(err)
			}
			w := it.worker()
			s.hints.setWorker(w)
			switch {
			case job.State != store.JobQueued:
				return fail(fmt.Errorf("job is %s: %w", job.State, store.ErrConflict))
			case !w.Registered:
				return fail(fmt.Errorf("worker %s is not registered: %w", conn, store.ErrConflict))
			case w.Draining:
				return fail(fmt.Errorf("worker %s is draining: %w", conn, store.ErrConflict))
			case w.State != store.WorkerIdle:
				return fail(fmt.Errorf("worker %s is %s: %w", conn, w.State, store.ErrConflict))
			case !w.Serves(job.Model):
				return fail(fmt.Errorf("worker %s does not serve %s: %w", conn, job.Model, store.ErrConflict))
			case it.TTL <= ttl(s.now()):
				return fail(fmt.Errorf("worker %s expired (a connection lost without $disconnect): %w", conn, store.ErrNotFound))
			}
			// The only other conditions: a stale account or pubkey.
			who = workerIdentity{account: w.AccountID, pubkey: w.Pubkey}
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("job or worker keeps changing: %w", store.ErrConflict))
		}
	}
}

// freeItem makes a worker idle if its record exists and still holds jobID
// (the condition; the caller drops this item and tries again if it fails),
// recording a measured speed.
func (s *Store) freeItem(conn, jobID string, milliTokPerSec int64) types.TransactWriteItem {
	update := "SET #state = :idle, #job = :none"
	v := values{":idle": str(string(store.WorkerIdle)), ":none": str(""), ":job": str(jobID)}
	n := names(aState, aJob)
	if milliTokPerSec > 0 {
		update += ", #milli_tok_per_sec = :speed"
		v[":speed"] = num(milliTokPerSec)
		n = names(aState, aJob, aSpeed)
	}
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: workerKey(conn).av(),
		UpdateExpression: aws.String(update), ConditionExpression: aws.String("attribute_exists(pk) AND #job = :job"),
		ExpressionAttributeNames: n, ExpressionAttributeValues: v}}
}

// recordSpeed records a measured speed on a worker that exists but no longer
// holds the job it was measured on. It is a hint for dispatch, so it is a
// separate write.
func (s *Store) recordSpeed(ctx context.Context, conn string, milliTokPerSec int64) error {
	if milliTokPerSec <= 0 {
		return nil
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: workerKey(conn).av(),
		UpdateExpression: aws.String("SET #milli_tok_per_sec = :speed"), ConditionExpression: exists,
		ExpressionAttributeNames: names(aSpeed), ExpressionAttributeValues: values{":speed": num(milliTokPerSec)}})
	if isConditionFailed(err) {
		return nil // the worker is gone
	}
	return err
}

// claimWorkerItem makes worker conn busy with job, on the condition that it
// is a live, registered, idle worker that serves the job's model, is not
// draining, and is the account and identity who says (the job records
// them).
func (s *Store) claimWorkerItem(conn string, job store.Job, who workerIdentity) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: workerKey(conn).av(),
		UpdateExpression:                    aws.String("SET #state = :busy, #job = :job"),
		ConditionExpression:                 aws.String("attribute_exists(pk) AND #registered = :t AND #draining = :f AND #state = :idle AND contains(#models, :model) AND #account = :wa AND #pubkey = :pk AND #ttl > :now"),
		ExpressionAttributeNames:            names(aState, aJob, aReg, aDraining, aModels, aAccount, aPubkey, schema.TTL),
		ExpressionAttributeValues:           values{":busy": str(string(store.WorkerBusy)), ":idle": str(string(store.WorkerIdle)), ":job": str(job.ID), ":t": boolean(true), ":f": boolean(false), ":model": str(job.Model), ":wa": str(who.account), ":pk": str(who.pubkey), ":now": num(ttl(s.now()))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}
}

// Requeue implements store.Store. The job goes back to its queue shard
// under its original age, so it leaves before younger jobs.
func (s *Store) Requeue(ctx context.Context, jobID, worker string, at time.Time) (store.Job, error) {
	fail := func(err error) (store.Job, error) {
		return store.Job{}, fmt.Errorf("dynamo: requeue job %s from %s: %w", jobID, worker, err)
	}
	job, err := s.knownJob(ctx, jobID)
	if err != nil {
		return fail(err)
	}
	freeWorker := true
	for try := 0; ; try++ {
		if job.State != store.JobAssigned || job.Worker != worker {
			if try == 0 {
				if job, err = s.readJob(ctx, jobID); err != nil {
					return fail(err)
				}
			}
			if job.State != store.JobAssigned || job.Worker != worker {
				return fail(fmt.Errorf("job is %s on %q: %w", job.State, job.Worker, store.ErrConflict))
			}
		}
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: jobKey(jobID).av(),
			UpdateExpression:                    aws.String("SET #state = :queued, #worker = :none, #worker_account = :none, #updated = :at, #gpk = :gpk, #gsk = :gsk REMOVE #worker_pubkey"),
			ConditionExpression:                 aws.String("#state = :assigned AND #worker = :w AND #attempts = :attempts"),
			ExpressionAttributeNames:            names(aState, aWorker, aWorkerAcc, aWorkerPub, aUpdated, aAttempts, schema.GPK, schema.GSK),
			ExpressionAttributeValues:           values{":queued": str(string(store.JobQueued)), ":assigned": str(string(store.JobAssigned)), ":none": str(""), ":w": str(worker), ":at": num(nanos(at)), ":gpk": str(queuePartition(job.Model, job.ID)), ":gsk": str(queueSortKey(job)), ":attempts": num(int64(job.Attempts))},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		if freeWorker {
			items = append(items, s.freeItem(worker, jobID, 0))
		}
		err := s.transact(ctx, append(items, s.queueCountItem(job, 1)))
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			job.State, job.Worker, job.WorkerAccount, job.WorkerPubkey, job.Updated = store.JobQueued, "", "", "", at
			s.hints.setJob(job)
			return job, nil
		}
		if tf.failed(0) {
			if job, err = s.oldJob(tf, 0); err != nil {
				return fail(err)
			}
		} else if tf.failed(1) {
			freeWorker = false // gone, or holding another job: leave it
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("job keeps changing: %w", store.ErrConflict))
		}
	}
}

// Complete implements store.Store: the job's end, the worker's earning and
// its ledger entry (or each share of a ring's earning and its entry),
// freeing the worker and the counters, in one transaction. A ring's
// completion first reads that the accounts it credits exist (see
// sharesExist): the only read its hot path adds.
func (s *Store) Complete(ctx context.Context, c store.Completion) error {
	fail := func(err error) error {
		return fmt.Errorf("dynamo: complete job %s on %s: %w", c.JobID, c.Worker, err)
	}
	if c.Earning < 0 || c.PromptTokens < 0 || c.CompletionTokens < 0 {
		return fail(errors.New("negative earning or token count"))
	}
	if c.Receipt != nil && c.Receipt.JobID != c.JobID {
		return fail(fmt.Errorf("receipt of job %q", c.Receipt.JobID))
	}
	if err := c.CheckShares(); err != nil {
		return fail(err)
	}
	job, err := s.knownJob(ctx, c.JobID)
	if err != nil {
		return fail(err)
	}
	freeWorker, sharesChecked := true, len(c.Shares) == 0
	for try := 0; ; try++ {
		if job.State != store.JobAssigned || job.Worker != c.Worker {
			if try == 0 {
				if job, err = s.readJob(ctx, c.JobID); err != nil {
					return fail(err)
				}
			}
			switch {
			case job.State == store.JobDone:
				return nil // a retry: the first call did everything
			case job.State != store.JobAssigned || job.Worker != c.Worker:
				return fail(fmt.Errorf("job is %s on %q: %w", job.State, job.Worker, store.ErrConflict))
			}
		}
		if c.Earning > job.Price {
			// An earning is a share of what was paid: more would mint credits.
			return fail(fmt.Errorf("earning %d exceeds the job's price %d", c.Earning, job.Price))
		}
		if !sharesChecked {
			if err := s.sharesExist(ctx, c.Shares); err != nil {
				return fail(err)
			}
			sharesChecked = true
		}
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: jobKey(c.JobID).av(),
			UpdateExpression:                    aws.String("SET #state = :done, #updated = :at, #prompt_tokens = :p, #completion_tokens = :c"),
			ConditionExpression:                 aws.String("#state = :assigned AND #worker = :w AND #worker_account = :wa"),
			ExpressionAttributeNames:            names(aState, aUpdated, aPrompt, aComplete, aWorker, aWorkerAcc),
			ExpressionAttributeValues:           values{":done": str(string(store.JobDone)), ":assigned": str(string(store.JobAssigned)), ":at": num(nanos(c.At)), ":p": num(c.PromptTokens), ":c": num(c.CompletionTokens), ":w": str(c.Worker), ":wa": str(job.WorkerAccount)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		items = s.withEarnings(items, job, c)
		countAt := -1
		if !job.Canary && job.WorkerPubkey != "" {
			countAt = len(items)
			// The coordinator of a ring counts its own part only.
			items = append(items, s.countJobItem(job, c, c.IdentityEarning(job.WorkerAccount, job.WorkerPubkey)))
		}
		if c.Receipt != nil {
			// A plain put: the job's condition lets exactly one Complete
			// through, and a retry of a done job stops above, so the
			// receipt is written once and never replaced.
			r := *c.Receipt
			r.AccountID = job.AccountID
			item, err := marshal(toReceiptItem(r))
			if err != nil {
				return fail(err)
			}
			items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item}})
		}
		freeAt := -1
		if freeWorker {
			freeAt = len(items)
			items = append(items, s.freeItem(c.Worker, c.JobID, c.MilliTokPerSec))
		}
		items = append(items, s.countCompletion(c.JobID, c.CompletionTokens, c.At,
			store.Money{Recognized: job.Paid(), Earned: c.Earning})...)
		err := s.transact(ctx, items)
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			if !freeWorker {
				if err := s.recordSpeed(ctx, c.Worker, c.MilliTokPerSec); err != nil {
					return fail(err)
				}
			}
			s.hints.setJob(store.Job{ID: c.JobID, State: store.JobDone, Updated: c.At})
			return nil
		}
		switch {
		case tf.failed(0):
			if job, err = s.oldJob(tf, 0); err != nil {
				return fail(err)
			}
			if job.State == store.JobDone {
				return nil
			}
		case countAt >= 0 && tf.failed(countAt):
			return fail(fmt.Errorf("worker identity %s: %w", job.WorkerPubkey, store.ErrNotActive))
		case freeAt >= 0 && tf.failed(freeAt):
			freeWorker = false
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("job keeps changing: %w", store.ErrConflict))
		}
	}
}

// withEarnings appends to a completion's transaction the credit of c's
// earning of job and its ledger entries: all of it to the job's worker
// account, or each of c's Shares to its account. An account holding
// several shares gets one update of its earnings shard with their sum (a
// transaction touches an item once) and one entry per share.
func (s *Store) withEarnings(items []types.TransactWriteItem, job store.Job, c store.Completion) []types.TransactWriteItem {
	if len(c.Shares) == 0 {
		if c.Earning > 0 {
			// The account exists, as Assign took it from the worker's
			// record.
			items = append(items, s.earnItem(job.WorkerAccount, c.JobID, c.Earning))
		}
		return s.withEntry(items, store.EarningEntry(job, c.Earning, c.At))
	}
	for _, a := range shareAccounts(c.Shares) {
		items = append(items, s.earnItem(a.account, c.JobID, a.amount))
	}
	for i, sh := range c.Shares {
		items = s.withEntry(items, store.RingShareEntry(job, i, sh, c.At))
	}
	return items
}

// accountShare is what one account is credited of a ring's earning.
type accountShare struct {
	account string
	amount  int64
}

// shareAccounts sums shares by account, in the order accounts first
// appear, leaving out those credited nothing.
func shareAccounts(shares []store.Share) []accountShare {
	var out []accountShare
	at := map[string]int{}
	for _, sh := range shares {
		if sh.Amount == 0 {
			continue
		}
		i, ok := at[sh.Account]
		if !ok {
			i, at[sh.Account] = len(out), len(out)
			out = append(out, accountShare{account: sh.Account})
		}
		out[i].amount += sh.Amount
	}
	return out
}

// sharesExist reads that every account a ring's shares credit exists (one
// consistent BatchGetItem; MaxShares is below its 100 keys). The write
// that follows cannot condition on it within the transaction's 100 items
// (a condition check per account would take 32 more), and need not:
// accounts are never deleted, so one that exists now still does when the
// transaction runs. Without the check, an earnings shard of no account
// would make the keeper's OwedEarnings fail on it.
func (s *Store) sharesExist(ctx context.Context, shares []store.Share) error {
	accounts := shareAccounts(shares)
	if len(accounts) == 0 {
		return nil
	}
	keys := make([]map[string]types.AttributeValue, len(accounts))
	for i, a := range accounts {
		keys[i] = accountKey(a.account).av()
	}
	found := map[string]bool{}
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var k key
		if err := unmarshal(item, &k); err != nil {
			return err
		}
		found[strings.TrimPrefix(k.PK, pAccount)] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the shares' accounts: %w", err)
	}
	for _, a := range accounts {
		if !found[a.account] {
			return fmt.Errorf("share account %s: %w", a.account, store.ErrNotFound)
		}
	}
	return nil
}

// earnItem credits an earning to an earnings shard of the account, not
// the account item: one operator's GPUs complete jobs concurrently, and
// one item would make their transactions conflict. The shard, chosen by
// job id, is created by its first earning, and is in the index's earnings
// partitions, where the keeper's payouts find the accounts that earned.
func (s *Store) earnItem(account, jobID string, earning int64) types.TransactWriteItem {
	ek := earnKey(account, jobID)
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: ek.av(),
		UpdateExpression:         aws.String("ADD #earned :e SET #gpk = :gpk, #gsk = :gsk"),
		ExpressionAttributeNames: names(aEarned, schema.GPK, schema.GSK),
		ExpressionAttributeValues: values{":e": num(earning), ":gpk": str(earnPartition(account)),
			":gsk": str(account + "#" + ek.SK)}}}
}

// countJobItem counts a completed job in its worker identity's reputation:
// the job, its earning and the measured speed. The identity's record
// exists from the worker's connect; if it does not (a job assigned before
// reputations were kept), the update creates it, active. Its condition is
// the identity's standing: a quarantined or banned identity's work is not
// counted or paid (the job's condition lets one Complete through). earned
// is what the identity earned of the job (Completion.IdentityEarning).
func (s *Store) countJobItem(job store.Job, c store.Completion, earned int64) types.TransactWriteItem {
	n := names(aJobsDone, aRepEarned, aStanding)
	v := values{":one": num(1), ":e": num(earned), ":active": str(string(store.StandingActive))}
	set := nameIdentity(job.WorkerAccount, job.WorkerPubkey, n, v) + ", #standing = if_not_exists(#standing, :active)"
	if c.MilliTokPerSec > 0 {
		set += ", #milli_tok_per_sec = :speed"
		n["#"+aSpeed], v[":speed"] = aSpeed, num(c.MilliTokPerSec)
	}
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
		Key:                      identityKey(job.WorkerAccount, job.WorkerPubkey).av(),
		UpdateExpression:         aws.String("ADD #jobs_completed :one, #earned_credits :e SET " + set),
		ConditionExpression:      aws.String("attribute_not_exists(#standing) OR #standing = :active"),
		ExpressionAttributeNames: n, ExpressionAttributeValues: v}}
}

// GetReceipt implements store.Store.
func (s *Store) GetReceipt(ctx context.Context, jobID string) (store.Receipt, error) {
	var it receiptItem
	if err := s.get(ctx, receiptKey(jobID), &it); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = fmt.Errorf("receipt: %w", store.ErrNotFound)
		}
		return store.Receipt{}, fmt.Errorf("dynamo: get receipt of job %s: %w", jobID, err)
	}
	return it.receipt(), nil
}

// countCompletion adds a completion to the job's shard of the totals (its
// money m too) and of the per-minute token counts.
func (s *Store) countCompletion(jobID string, tokens int64, at time.Time, m store.Money) []types.TransactWriteItem {
	p := fmt.Sprintf("%s%d", pStats, shard(jobID, statShards))
	minute := at.Truncate(time.Minute)
	clauses, n, v := moneyAdds(m)
	n["#"+aJobs], n["#"+aTokens], v[":one"], v[":t"] = aJobs, aTokens, num(1), num(tokens)
	return []types.TransactWriteItem{
		{Update: &types.Update{TableName: s.tableName(), Key: key{p, sTotal}.av(),
			UpdateExpression:         aws.String("ADD " + strings.Join(append([]string{"#jobs :one", "#tokens :t"}, clauses...), ", ")),
			ExpressionAttributeNames: n, ExpressionAttributeValues: v}},
		{Update: &types.Update{TableName: s.tableName(), Key: key{p, sMinute + timeKey(minute)}.av(),
			UpdateExpression:         aws.String("ADD #tokens :t SET #ttl = :ttl"),
			ExpressionAttributeNames: names(aTokens, schema.TTL), ExpressionAttributeValues: values{":t": num(tokens), ":ttl": num(ttl(minute.Add(tokenMinuteTTL)))}}},
	}
}

// Fail implements store.Store. It reads the job first: Fail is off the hot
// path, and what it writes depends on the job's state. A refund takes the
// price out of the key's usage in the same transaction, built from the
// key's reset and period as last seen (see refundKeyItem), and writes its
// ledger entry there too.
func (s *Store) Fail(ctx context.Context, jobID, reason string, refund bool, at time.Time) (store.Job, error) {
	fail := func(err error) (store.Job, error) {
		return store.Job{}, fmt.Errorf("dynamo: fail job %s: %w", jobID, err)
	}
	job, err := s.readJob(ctx, jobID)
	if err != nil {
		return fail(err)
	}
	freeWorker := true
	refundKey, spend := true, s.hints.key(job.KeyHash)
	var acct *store.Account // read when a refund gives back an allowance part
	for try := 0; ; try++ {
		next := job
		var cond string
		v := values{":attempts": num(int64(job.Attempts))}
		switch job.State {
		case store.JobDone:
			return fail(fmt.Errorf("job is done: %w", store.ErrConflict))
		case store.JobFailed:
			if !refund || job.Refunded {
				return job, nil
			}
			cond = "#state = :failed AND #refunded = :f"
			v[":failed"], v[":f"] = str(string(store.JobFailed)), boolean(false)
		case store.JobQueued:
			cond = "#state = :queued AND #attempts = :attempts"
			v[":queued"] = str(string(store.JobQueued))
		case store.JobAssigned:
			cond = "#state = :assigned AND #worker = :w AND #attempts = :attempts"
			v[":assigned"], v[":w"] = str(string(store.JobAssigned)), str(job.Worker)
		default:
			return fail(fmt.Errorf("job in unknown state %q", job.State))
		}
		if job.State != store.JobFailed {
			next.State, next.FailReason, next.Updated = store.JobFailed, reason, at
		}
		if refund {
			next.Refunded = true
		}
		update := "SET #state = :st, #fail_reason = :reason, #updated = :at, #refunded = :refunded REMOVE #gpk, #gsk"
		v[":st"], v[":reason"], v[":at"], v[":refunded"] = str(string(next.State)), str(next.FailReason), num(nanos(next.Updated)), boolean(next.Refunded)
		items := []types.TransactWriteItem{{Update: &types.Update{TableName: s.tableName(), Key: jobKey(jobID).av(),
			UpdateExpression: aws.String(update), ConditionExpression: aws.String(cond),
			ExpressionAttributeNames:            names(aState, aReason, aUpdated, aRefunded, aAttempts, aWorker, schema.GPK, schema.GSK),
			ExpressionAttributeValues:           v,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}}
		// Unused names are an error in DynamoDB: keep only those the
		// condition mentions.
		if job.State != store.JobAssigned {
			delete(items[0].Update.ExpressionAttributeNames, "#worker")
		}
		if job.State == store.JobFailed {
			delete(items[0].Update.ExpressionAttributeNames, "#attempts")
			delete(v, ":attempts")
		}
		refundAt := -1
		if refund && !job.Refunded {
			// The allowance part goes back only to the day it came from:
			// the account's allowance day, read, pins what is given.
			back, cond, rv := int64(0), *exists, values{}
			if job.FromAllowance > 0 {
				if acct == nil {
					a, err := s.GetAccount(ctx, job.AccountID)
					if err != nil {
						return fail(err)
					}
					acct = &a
				}
				back = store.AllowanceBack(*acct, job)
				cond = "attribute_exists(pk) AND attribute_not_exists(#allowance_day)"
				if acct.AllowanceDay != "" {
					cond, rv[":aday"] = "#allowance_day = :aday", str(acct.AllowanceDay)
				}
			}
			rv[":fc"], rv[":fa"], rv[":price"] = num(job.Price-job.FromAllowance), num(back), num(job.Price)
			n := names(aCredits, aAllowance, aSpent)
			if job.FromAllowance > 0 {
				n["#"+aAllowDay] = aAllowDay
			}
			refundAt = len(items)
			items = append(items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: accountKey(job.AccountID).av(),
				UpdateExpression:                    aws.String("SET #credits = #credits + :fc, #allowance = #allowance + :fa, #spent = #spent - :price"),
				ConditionExpression:                 aws.String(cond),
				ExpressionAttributeNames:            n,
				ExpressionAttributeValues:           rv,
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
			items = s.withEntry(items, store.RefundEntry(job, back, at))
		}
		keyAt := -1
		if refundAt >= 0 && refundKey && job.KeyHash != "" && job.Price > 0 {
			keyAt = len(items)
			items = append(items, s.refundKeyItem(job, spend))
		}
		freeAt := -1
		if job.State == store.JobAssigned && freeWorker {
			freeAt = len(items)
			items = append(items, s.freeItem(job.Worker, jobID, 0))
		}
		// The paid part is the network's once the job ends unrefunded,
		// and the customer's again if a refund comes later.
		switch {
		case job.State != store.JobFailed && !refund:
			items = s.withMoney(items, jobID, store.Money{Recognized: job.Paid()})
		case job.State == store.JobFailed && refundAt >= 0:
			items = s.withMoney(items, jobID, store.Money{Recognized: -job.Paid()})
		}
		if job.State == store.JobQueued {
			items = append(items, s.queueCountItem(job, -1))
		}
		err := s.transact(ctx, items)
		var tf *txFailed
		if !errors.As(err, &tf) {
			if err != nil {
				return fail(err)
			}
			s.hints.setJob(next)
			return next, nil
		}
		switch {
		case tf.failed(0):
			if job, err = s.oldJob(tf, 0); err != nil {
				return fail(err)
			}
		case refundAt >= 0 && tf.failed(refundAt):
			if tf.old(refundAt) == nil {
				return fail(fmt.Errorf("account %s: %w", job.AccountID, store.ErrNotFound))
			}
			acct = nil // its allowance day moved on: read it again
		case keyAt >= 0 && tf.failed(keyAt):
			// The key's reset, period or period usage was not as
			// known, or the key is gone (nothing to take back).
			old := tf.old(keyAt)
			if refundKey = old != nil; refundKey {
				var it secretItem
				if err := unmarshal(old, &it); err != nil {
					return fail(err)
				}
				spend = spendOf(it)
				s.hints.setKey(job.KeyHash, spend)
			}
		case freeAt >= 0 && tf.failed(freeAt):
			freeWorker = false
		}
		if try >= maxStaleRetries {
			return fail(fmt.Errorf("job keeps changing: %w", store.ErrConflict))
		}
	}
}
