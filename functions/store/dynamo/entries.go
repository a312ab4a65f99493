package dynamo

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/infra/schema"
)

// entryItem is a line of an account's ledger, in the account's partition
// (LEDGER# sorts after ACCT, EARN#, IDENT#, KEY# and KEYS#, before TOKEN#,
// and no other query of the partition reaches it), so that one query reads
// a page of it, newest first. It is written by the transaction that moves
// the money, and never changes. Zero amounts and empty strings are not
// stored.
type entryItem struct {
	key
	ID        string `dynamodbav:"id"`
	Account   string `dynamodbav:"account"`
	Kind      string `dynamodbav:"kind"`
	Credits   int64  `dynamodbav:"credits"`
	Allowance int64  `dynamodbav:"allowance,omitempty"`
	Job       string `dynamodbav:"job,omitempty"`
	Ref       string `dynamodbav:"ref,omitempty"`
	At        int64  `dynamodbav:"at"`
}

// entryKey is an entry's key in its account's partition.
func entryKey(account, id string) key { return key{pAccount + account, sLedger + id} }

func (i entryItem) entry() store.Entry {
	return store.Entry{AccountID: i.Account, ID: i.ID, Kind: store.EntryKind(i.Kind), Credits: i.Credits,
		Allowance: i.Allowance, JobID: i.Job, Ref: i.Ref, At: fromNanos(i.At)}
}

// withEntry appends to a move's transaction the put of its entry e, if it
// moves anything. The put must create the item: each move is made once, and
// its entry with it.
func (s *Store) withEntry(items []types.TransactWriteItem, e store.Entry) []types.TransactWriteItem {
	if !e.Moves() {
		return items
	}
	item := entryKey(e.AccountID, e.ID).av()
	item["id"], item[aAccount], item["kind"], item[aCredits] = str(e.ID), str(e.AccountID), str(string(e.Kind)), num(e.Credits)
	item["at"] = num(nanos(e.At))
	if e.Allowance != 0 {
		item[aAllowance] = num(e.Allowance)
	}
	if e.JobID != "" {
		item[aJob] = str(e.JobID)
	}
	if e.Ref != "" {
		item["ref"] = str(e.Ref)
	}
	return append(items, types.TransactWriteItem{Put: &types.Put{TableName: s.tableName(), Item: item,
		ConditionExpression: notExists}})
}

// Entries implements store.AccountLedger: one query of the account's
// LEDGER# items, newest first, from the one after before; more pages only
// when a page stops at DynamoDB's 1 MB before limit entries.
func (s *Store) Entries(ctx context.Context, accountID, before string, limit int) ([]store.Entry, error) {
	fail := func(err error) ([]store.Entry, error) {
		return nil, fmt.Errorf("dynamo: entries of %s: %w", accountID, err)
	}
	if err := store.CheckEntriesLimit(limit); err != nil {
		return fail(err)
	}
	q := &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("#pk = :pk AND begins_with(#sk, :prefix)"),
		ExpressionAttributeNames:  names(schema.PK, schema.SK),
		ExpressionAttributeValues: values{":pk": str(pAccount + accountID), ":prefix": str(sLedger)},
		ScanIndexForward:          aws.Bool(false),
		ConsistentRead:            aws.Bool(true),
	}
	if before != "" {
		q.ExclusiveStartKey = entryKey(accountID, before).av()
	}
	out := []store.Entry{}
	err := s.queryUpTo(ctx, q, limit, func(item map[string]types.AttributeValue) error {
		var it entryItem
		err := unmarshal(item, &it)
		out = append(out, it.entry())
		return err
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}
