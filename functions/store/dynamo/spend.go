package dynamo

import (
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
)

// An API key's spending is counted on its hash item by the writes that
// move credits: Admit adds the price, a refund takes it back. Either
// write has two forms, for a key whose period is the job's and for one
// whose period is another (a new day: the period usage starts again), and
// DynamoDB cannot choose between them in one expression. So the write is
// built from what this process last saw of the key (keySpend: its limit,
// its reset and its period), with conditions that hold only if that is
// still so; a failed condition returns the key as it is (ALL_OLD), and
// the second try is exact. A key this process has not seen is assumed to
// have no limit and no period (a key that never resets, as most do).

// exprs collects the names and values that an item's expressions use,
// as they are used: DynamoDB refuses names and values no expression
// mentions.
type exprs struct {
	names  map[string]string
	values values
}

func newExprs() *exprs { return &exprs{names: map[string]string{}, values: values{}} }

// n is the placeholder of attribute a.
func (e *exprs) n(a string) string {
	e.names["#"+a] = a
	return "#" + a
}

// v is the placeholder ph, standing for av.
func (e *exprs) v(ph string, av types.AttributeValue) string {
	e.values[ph] = av
	return ph
}

// is is the condition that string attribute a holds v; for "" that it is
// absent, as empty strings are not stored.
func (e *exprs) is(a, v string) string {
	if v == "" {
		return "attribute_not_exists(" + e.n(a) + ")"
	}
	return e.n(a) + " = " + e.v(":"+a, str(v))
}

// isNot is the condition that string attribute a does not hold v.
func (e *exprs) isNot(a, v string) string {
	if v == "" {
		return "attribute_exists(" + e.n(a) + ")"
	}
	return "(attribute_not_exists(" + e.n(a) + ") OR " + e.n(a) + " <> " + e.v(":"+a, str(v)) + ")"
}

// conditional is an update of item k under all the conditions, returning the
// item as it was if one fails.
func (s *Store) conditional(k key, e *exprs, update string, conds []string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{TableName: s.tableName(), Key: k.av(),
		UpdateExpression:                    aws.String(update),
		ConditionExpression:                 aws.String(strings.Join(conds, " AND ")),
		ExpressionAttributeNames:            e.names,
		ExpressionAttributeValues:           e.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}}
}

// chargeKeyItem is Admit's write to the key, assuming k: the key exists,
// is not revoked, is the account's and has not expired at the job's
// creation; its limit and reset are k's; the price fits in what is left
// of the limit in the job's period; and it adds the price to the usage
// and to the period usage of the job's period, the period usage starting
// from 0 when the key's period (k's) is another.
func (s *Store) chargeKeyItem(hash, account string, job store.Job, k keySpend) types.TransactWriteItem {
	e := newExprs()
	p := store.PeriodOf(k.reset, job.Created)
	expires := e.n(aExpiresAt)
	conds := []string{"attribute_exists(pk)", "attribute_not_exists(" + e.n(aRevoked) + ")",
		e.n(aAccount) + " = " + e.v(":account", str(account)),
		"(attribute_not_exists(" + expires + ") OR " + expires + " > " + e.v(":created", num(nanos(job.Created))) + ")",
		e.is(aReset, k.reset)}
	limit := e.n(aLimit)
	if k.limit > 0 {
		conds = append(conds, limit+" = "+e.v(":limit", num(k.limit)))
	} else {
		conds = append(conds, "(attribute_not_exists("+limit+") OR "+limit+" <= "+e.v(":zero", num(0))+")")
	}
	price := e.v(":price", num(job.Price))
	same := k.period == p
	switch {
	case k.limit > 0 && job.Price > k.limit:
		// Never true, given the limit above: refused, once the
		// conditions before it (revoked, expired) are known to hold.
		conds = append(conds, limit+" >= "+price)
	case k.limit > 0 && same:
		spent := e.n(aPerUsage)
		conds = append(conds, "(attribute_not_exists("+spent+") OR "+spent+" <= "+e.v(":room", num(k.limit-job.Price))+")")
	}
	update := fmt.Sprintf("ADD %s %s", e.n(aUsage), price)
	switch {
	case same:
		conds = append(conds, e.is(aPeriod, p))
		update += fmt.Sprintf(", %s %s", e.n(aPerUsage), price)
	case p == "":
		conds = append(conds, e.isNot(aPeriod, p))
		update += fmt.Sprintf(" SET %s = %s REMOVE %s", e.n(aPerUsage), price, e.n(aPeriod))
	default:
		conds = append(conds, e.isNot(aPeriod, p))
		update += fmt.Sprintf(" SET %s = %s, %s = %s", e.n(aPerUsage), price, e.n(aPeriod), e.v(":"+aPeriod, str(p)))
	}
	return s.conditional(apiKeys.hashKey(hash), e, update, conds)
}

// chargeRefused says why chargeKeyItem's condition failed, from the key
// as it was (old, ALL_OLD): ErrNotFound, ErrRevoked, ErrExpired or
// ErrKeyLimit in that order, or none of them (what this process knew of
// the key was stale: try again). The key's spend, as it is, comes back
// either way, for the next write.
func chargeRefused(old map[string]types.AttributeValue, account string, job store.Job) (keySpend, error) {
	if old == nil {
		return keySpend{}, fmt.Errorf("api key: %w", store.ErrNotFound)
	}
	var it secretItem
	if err := unmarshal(old, &it); err != nil {
		return keySpend{}, err
	}
	key, spend := it.secret(), spendOf(it)
	switch {
	case !key.Active():
		return spend, fmt.Errorf("api key %s: %w", key.ID, store.ErrRevoked)
	case key.AccountID != account:
		return spend, fmt.Errorf("job account %q is not the api key's account", account)
	case key.Expired(job.Created):
		return spend, fmt.Errorf("api key %s: %w", key.ID, store.ErrExpired)
	case key.Limit > 0 && key.Spent(job.Created)+job.Price > key.Limit:
		return spend, fmt.Errorf("api key %s: spent %d of %d, price %d: %w",
			key.ID, key.Spent(job.Created), key.Limit, job.Price, store.ErrKeyLimit)
	}
	return spend, nil
}

// refundKeyItem is a refund's write to the key the job was admitted with,
// assuming k: the key exists and its reset is k's; it takes the price out
// of the usage and, when the key's period (k's) is still the job's, out
// of the period usage, never below 0. The usage itself holds the price:
// Admit added it, in the write that made the job, and only this refund,
// given once, takes it back.
func (s *Store) refundKeyItem(job store.Job, k keySpend) types.TransactWriteItem {
	e := newExprs()
	p := store.PeriodOf(k.reset, job.Created)
	conds := []string{"attribute_exists(pk)", e.is(aReset, k.reset)}
	back := e.v(":back", num(-job.Price))
	update := fmt.Sprintf("ADD %s %s", e.n(aUsage), back)
	switch {
	case k.period != p:
		conds = append(conds, e.isNot(aPeriod, p))
	case !k.known || k.periodUsage >= job.Price:
		spent := e.n(aPerUsage)
		conds = append(conds, e.is(aPeriod, p), spent+" >= "+e.v(":price", num(job.Price)))
		update += fmt.Sprintf(", %s %s", spent, back)
	default:
		spent := e.n(aPerUsage)
		conds = append(conds, e.is(aPeriod, p),
			"(attribute_not_exists("+spent+") OR "+spent+" < "+e.v(":price", num(job.Price))+")")
		update += fmt.Sprintf(" SET %s = %s", spent, e.v(":zero", num(0)))
	}
	return s.conditional(apiKeys.hashKey(job.KeyHash), e, update, conds)
}
