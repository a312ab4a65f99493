// Package schema is the one definition of the gateway's DynamoDB table: its
// keys, its index, its TTL attribute and its settings. The DynamoDB store
// names attributes through it, the dev runner and the tests create tables
// from it, and the Terraform checks compare terraform/ against it.
//
// The table is single-table design: every record kind lives in one table
// under a typed partition key (ACCT#…, JOB#…), so that any two records that
// must change together can share one TransactWriteItems call, and a fresh
// table per test is one CreateTable. The access patterns, and the key and
// index each uses, are listed in functions/store/dynamo/README.md.
package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Key and index attribute names.
const (
	// PK and SK are the table's partition and sort key (strings).
	PK = "pk"
	SK = "sk"
	// Index is the one global secondary index, overloaded: queued jobs
	// (partition "Q#<model>#<shard>", sorted by age) and connected workers
	// (partition "W#<shard>", sorted by connection id). It is sparse: only
	// items that carry GPK are in it, so it holds the queue and the live
	// workers, never the history.
	Index = "gsi1"
	GPK   = "gpk"
	GSK   = "gsk"
	// TTL is the expiry attribute (epoch seconds) of ephemeral items: rate
	// windows, nonces, per-minute token counts, connection records.
	TTL = "ttl"
)

// DefaultTable is the table name when none is configured.
const DefaultTable = "c0mpute"

// CreateTableInput describes the table. Billing is on demand: traffic is
// bursty (one chat request is three writes) and capacity planning for
// provisioned mode would be a guess. The index projects every attribute
// because its readers (dispatch, stats) need whole records.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	str := func(n string) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: types.ScalarAttributeTypeS}
	}
	key := func(n string, t types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(n), KeyType: t}
	}
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{str(PK), str(SK), str(GPK), str(GSK)},
		KeySchema:            []types.KeySchemaElement{key(PK, types.KeyTypeHash), key(SK, types.KeyTypeRange)},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName:  aws.String(Index),
			KeySchema:  []types.KeySchemaElement{key(GPK, types.KeyTypeHash), key(GSK, types.KeyTypeRange)},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	}
}

// Client is what Ensure needs from the DynamoDB client.
type Client interface {
	DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(context.Context, *dynamodb.CreateTableInput, ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(context.Context, *dynamodb.UpdateTimeToLiveInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Ensure creates the table if it does not exist, waits until it is active
// and turns TTL on. An existing table is left as it is: in AWS, Terraform
// owns it, and this only runs for local and test tables.
func Ensure(ctx context.Context, c Client, name string) error {
	_, err := c.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	var missing *types.ResourceNotFoundException
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &missing):
		return fmt.Errorf("schema: describe table %s: %w", name, err)
	}
	if _, err := c.CreateTable(ctx, CreateTableInput(name)); err != nil {
		var inUse *types.ResourceInUseException
		if !errors.As(err, &inUse) { // someone else created it meanwhile
			return fmt.Errorf("schema: create table %s: %w", name, err)
		}
	}
	w := dynamodb.NewTableExistsWaiter(c, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, 2*time.Minute); err != nil {
		return fmt.Errorf("schema: wait for table %s: %w", name, err)
	}
	_, err = c.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(name),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTL), Enabled: aws.Bool(true)},
	})
	if err != nil {
		return fmt.Errorf("schema: enable ttl on %s: %w", name, err)
	}
	return nil
}
