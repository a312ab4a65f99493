package dynamo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// verAsRead is the condition that an item's ver is still the one read
// (:ver; 0 when it had none, or did not exist): ver is never removed, and
// once set it is at least 1.
const verAsRead = "attribute_not_exists(#ver) OR #ver = :ver"

// standings is what a connect or a verdict read of an identity's and its
// token's reputations: the items (zero when there are none), whose vers
// its write is conditioned on.
type standings struct {
	identity identityItem
	token    tokenStandingItem
}

// readStandings reads an identity's and a token's reputations in one
// round trip; an empty pubkey or token hash is none.
func (s *Store) readStandings(ctx context.Context, account, pubkey, tokenHash string) (standings, error) {
	var st standings
	var keys []map[string]types.AttributeValue
	if pubkey != "" {
		keys = append(keys, identityKey(account, pubkey).av())
	}
	if tokenHash != "" {
		keys = append(keys, tokenStandingKey(tokenHash).av())
	}
	if len(keys) == 0 {
		return st, nil
	}
	err := s.batchGet(ctx, keys, func(item map[string]types.AttributeValue) error {
		var k key
		if err := unmarshal(item, &k); err != nil {
			return err
		}
		if k.SK == sTokenRep {
			return unmarshal(item, &st.token)
		}
		return unmarshal(item, &st.identity)
	})
	if err != nil {
		return standings{}, fmt.Errorf("read the standings: %w", err)
	}
	return st, nil
}

// learn takes the items of st whose ver condition failed in tf (at
// identityAt and tokenAt; -1 where not in it) as they are now.
func (st *standings) learn(tf *txFailed, identityAt, tokenAt int) error {
	if identityAt >= 0 && tf.failed(identityAt) {
		st.identity = identityItem{}
		if err := unmarshalOld(tf, identityAt, &st.identity); err != nil {
			return err
		}
	}
	if tokenAt >= 0 && tf.failed(tokenAt) {
		st.token = tokenStandingItem{}
		if err := unmarshalOld(tf, tokenAt, &st.token); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalOld decodes item i's ALL_OLD image into v, leaving v as it is
// when the item did not exist.
func unmarshalOld(tf *txFailed, i int, v any) error {
	if old := tf.old(i); old != nil {
		return unmarshal(old, v)
	}
	return nil
}

// banned is ErrBanned if the identity or the token is.
func (st standings) banned() error {
	switch {
	case st.identity.Standing == string(store.StandingBanned):
		return fmt.Errorf("worker identity %s: %w", st.identity.Pubkey, store.ErrBanned)
	case st.token.standing() == store.StandingBanned:
		return fmt.Errorf("worker token: %w", store.ErrBanned)
	}
	return nil
}

// worker is the standing and strikes a worker with these takes.
func (st standings) worker() (store.Standing, int64) {
	return store.Worse(st.identity.reputation().Standing, st.token.standing()), st.identity.Strikes
}

// nameIdentity adds to an update of an identity's reputation the SET
// clauses that name the identity, so that an update that creates the item
// makes a whole record, listed in the index; n and v gain their names and
// values.
func nameIdentity(account, pubkey string, n map[string]string, v values) string {
	gpk, gsk := identityIndex(account, pubkey)
	for _, a := range []string{aPubkey, aAccount, schema.GPK, schema.GSK} {
		n["#"+a] = a
	}
	v[":ident_pk"], v[":ident_acct"], v[":ident_gpk"], v[":ident_gsk"] = str(pubkey), str(account), str(gpk), str(gsk)
	return "#pubkey = :ident_pk, #account = :ident_acct, #gpk = :ident_gpk, #gsk = :ident_gsk"
}

// The first items of Judge's transaction, in order.
const (
	judgeMarker   = iota // the verdict's record: new
	judgeIdentity        // the identity's reputation: ver as read
)

// Judge implements store.Store in one transaction: a record of the verdict
// (VERDICT#<job>#<pubkey>, which must be new: a retry finds it and changes
// nothing), the identity's reputation and the token's standing, each
// conditioned on the ver read before, a passed canary's earning (an
// earnings shard, as Complete credits) and the live worker's standing.
// Concurrent verdicts on one identity or token lose their condition but
// one, learn the item as it is now and try again, up to conflictRetries
// times with backoff.
//
// The reputation's counts change by ADD, so that a Complete, which counts
// without a condition, is never lost; what Judge computes from what it
// read (strikes, standing) is what the ver protects.
func (s *Store) Judge(ctx context.Context, v store.Verdict) (store.Reputation, error) {
	fail := func(err error) (store.Reputation, error) {
		return store.Reputation{}, fmt.Errorf("dynamo: judge job %s of %s: %w", v.JobID, v.Pubkey, err)
	}
	if err := v.Check(); err != nil {
		return fail(err)
	}
	st, err := s.readStandings(ctx, v.AccountID, v.Pubkey, v.TokenHash)
	if err != nil {
		return fail(err)
	}
	workerLive := v.Conn != ""
	wait := conflictBaseWait
	for try := 0; ; try++ {
		before := st.identity.reputation()
		if st.identity.Pubkey == "" { // new here
			before = store.Reputation{Pubkey: v.Pubkey, AccountID: v.AccountID, TokenHash: v.TokenHash,
				Standing: store.StandingActive, FirstSeen: v.At, LastSeen: v.At}
		}
		after := before.Judged(v)
		j := s.judgement(v, st, before, after, workerLive)
		err := s.transact(ctx, j.items)
		var tf *txFailed
		switch {
		case err == nil:
			return after, nil
		case !errors.As(err, &tf):
			return fail(err)
		case tf.failed(judgeMarker):
			// Applied before, by this verdict's first call.
			r, err := s.GetReputation(ctx, v.AccountID, v.Pubkey)
			if err != nil {
				return fail(err)
			}
			return r, nil
		case j.accountAt >= 0 && tf.failed(j.accountAt):
			return fail(fmt.Errorf("account %s: %w", v.AccountID, store.ErrNotFound))
		case tf.failed(judgeIdentity) || j.tokenAt >= 0 && tf.failed(j.tokenAt):
			// Another verdict on the identity or the token came first.
			if err := st.learn(tf, judgeIdentity, j.tokenAt); err != nil {
				return fail(err)
			}
			if err := sleep(ctx, &wait); err != nil {
				return fail(err)
			}
		case j.workerAt >= 0 && tf.failed(j.workerAt):
			workerLive = false // gone: its next connect reads the standing
		default:
			return fail(tf)
		}
		if try >= conflictRetries {
			return fail(fmt.Errorf("the reputation keeps changing: %w", store.ErrConflict))
		}
	}
}

// judgement is one try of a verdict's transaction: its items, the judge
// constants' first, and where the others are (-1: not in it).
type judgement struct {
	items                        []types.TransactWriteItem
	tokenAt, accountAt, workerAt int
}

// judgement builds the transaction of verdict v, which takes the identity
// from before to after, on the standings st: the verdict's record, the
// identity's reputation, the token's standing (if it has a token), a
// passed canary's earning, and the live worker's standing (if workerLive).
func (s *Store) judgement(v store.Verdict, st standings, before, after store.Reputation, workerLive bool) judgement {
	v.Earning = after.EarnedCredits - before.EarnedCredits // a passed canary's; none for a banned identity
	marker := verdictKey(v.JobID, v.Pubkey).av()
	marker[aAccount], marker["kind"], marker[aStrikes] = str(v.AccountID), str(string(v.Kind)), num(v.Strikes)
	marker[aLastWhy], marker["at"] = str(v.Reason), num(nanos(v.At))
	n := names(aStanding, aStrikes, aLastWhy, aVersion, aFirstSeen, aLastSeen, aTokenHash, aRejected, aPassed, aFailed, aRepEarned)
	vals := values{":standing": str(string(after.Standing)), ":strikes": num(after.Strikes), ":why": str(after.LastReason),
		":next": num(st.identity.Version + 1), ":ver": num(st.identity.Version), ":at": num(nanos(v.At)), ":th": str(v.TokenHash),
		":rejected": num(after.JobsRejected - before.JobsRejected), ":passed": num(after.CanariesPassed - before.CanariesPassed),
		":failed": num(after.CanariesFailed - before.CanariesFailed), ":earned": num(after.EarnedCredits - before.EarnedCredits)}
	set := nameIdentity(v.AccountID, v.Pubkey, n, vals) +
		", #standing = :standing, #strikes = :strikes, #last_reason = :why, #ver = :next" +
		", #first_seen = if_not_exists(#first_seen, :at), #last_seen = if_not_exists(#last_seen, :at), #token_hash = if_not_exists(#token_hash, :th)"
	j := judgement{tokenAt: -1, accountAt: -1, workerAt: -1, items: []types.TransactWriteItem{
		judgeMarker: {Put: &types.Put{TableName: s.tableName(), Item: marker, ConditionExpression: notExists}},
		judgeIdentity: {Update: &types.Update{TableName: s.tableName(), Key: identityKey(v.AccountID, v.Pubkey).av(),
			UpdateExpression: aws.String("SET " + set +
				" ADD #jobs_rejected :rejected, #canaries_passed :passed, #canaries_failed :failed, #earned_credits :earned"),
			ConditionExpression:      aws.String(verAsRead),
			ExpressionAttributeNames: n, ExpressionAttributeValues: vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}}
	tokenStanding := store.StandingActive // of a worker without a token
	if v.TokenHash != "" {
		var strikes int64
		tokenStanding, strikes = store.TokenJudged(st.token.standing(), st.token.Strikes, before, after)
		j.tokenAt = len(j.items)
		j.items = append(j.items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(),
			Key:                      tokenStandingKey(v.TokenHash).av(),
			UpdateExpression:         aws.String("SET #standing = :standing, #strikes = :strikes, #ver = :next"),
			ConditionExpression:      aws.String(verAsRead),
			ExpressionAttributeNames: names(aStanding, aStrikes, aVersion),
			ExpressionAttributeValues: values{":standing": str(string(tokenStanding)), ":strikes": num(strikes),
				":next": num(st.token.Version + 1), ":ver": num(st.token.Version)},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}})
	}
	if v.Kind == store.VerdictCanaryPassed && v.Earning > 0 {
		j.accountAt = len(j.items)
		j.items = append(j.items,
			types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{TableName: s.tableName(),
				Key: accountKey(v.AccountID).av(), ConditionExpression: exists}},
			s.earnItem(v.AccountID, v.JobID, v.Earning))
		j.items = s.withEntry(j.items, store.CanaryEarningEntry(v))
		j.items = s.withMoney(j.items, v.JobID+"#"+v.Pubkey, store.Money{Earned: v.Earning})
	}
	if workerLive {
		j.workerAt = len(j.items)
		j.items = append(j.items, types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: workerKey(v.Conn).av(),
			UpdateExpression:         aws.String("SET #standing = :standing, #strikes = :strikes"),
			ConditionExpression:      aws.String("attribute_exists(pk) AND #pubkey = :pk AND #account = :acct"),
			ExpressionAttributeNames: names(aStanding, aStrikes, aPubkey, aAccount),
			ExpressionAttributeValues: values{":standing": str(string(store.Worse(after.Standing, tokenStanding))),
				":strikes": num(after.Strikes), ":pk": str(v.Pubkey), ":acct": str(v.AccountID)}}})
	}
	return j
}

// GetReputation implements store.Store.
func (s *Store) GetReputation(ctx context.Context, accountID, pubkey string) (store.Reputation, error) {
	var it identityItem
	if err := s.get(ctx, identityKey(accountID, pubkey), &it); err != nil {
		return store.Reputation{}, fmt.Errorf("dynamo: get reputation of %s on %s: %w", pubkey, accountID, err)
	}
	return it.reputation(), nil
}

// Reputations implements store.Store: an account's identities are one
// query of its partition, in pubkey order; every account's are the
// index's identity partitions, read in parallel and sorted.
func (s *Store) Reputations(ctx context.Context, accountID string) ([]store.Reputation, error) {
	decode := func(item map[string]types.AttributeValue) (store.Reputation, error) {
		var it identityItem
		err := unmarshal(item, &it)
		return it.reputation(), err
	}
	var out []store.Reputation
	var err error
	if accountID != "" {
		err = s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
			ExpressionAttributeNames:  names(schema.PK, schema.SK),
			ExpressionAttributeValues: values{":pk": str(pAccount + accountID), ":prefix": str(sIdentity)},
			ConsistentRead:            aws.Bool(true),
		}, func(item map[string]types.AttributeValue) error {
			r, err := decode(item)
			out = append(out, r)
			return err
		})
	} else if out, err = queryShards(ctx, s, gIdent, identityShards, nil, decode); err == nil {
		slices.SortFunc(out, func(a, b store.Reputation) int {
			return cmp.Or(cmp.Compare(a.AccountID, b.AccountID), cmp.Compare(a.Pubkey, b.Pubkey))
		})
	}
	if err != nil {
		return nil, fmt.Errorf("dynamo: reputations of %q: %w", accountID, err)
	}
	return out, nil
}

// SetTrusted implements store.Store.
func (s *Store) SetTrusted(ctx context.Context, accountID, pubkey string, trusted bool) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: s.tableName(), Key: identityKey(accountID, pubkey).av(),
		UpdateExpression: aws.String("SET #trusted = :t"), ConditionExpression: exists,
		ExpressionAttributeNames: names(aTrusted), ExpressionAttributeValues: values{":t": boolean(trusted)}})
	if isConditionFailed(err) {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("dynamo: set trusted %s on %s: %w", pubkey, accountID, err)
	}
	return nil
}
