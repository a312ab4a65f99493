// Package dynamotest gives tests a fresh table on the DynamoDB that
// C0MPUTE_DYNAMODB_ENDPOINT points at: AWS's DynamoDB Local, which
// scripts/test downloads, starts and stops. Without the variable, tests
// skip (or fail, under C0MPUTE_REQUIRE_INTEGRATION=1).
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/infra/schema"
	"github.com/c0mpute/c0mpute/infra/testenv"
)

// Endpoint returns the DynamoDB endpoint, or ends the test when none is set.
func Endpoint(t testing.TB) string {
	t.Helper()
	ep := os.Getenv(dynamo.EnvEndpoint)
	if ep == "" {
		testenv.Missing(t, "DynamoDB Local", dynamo.EnvEndpoint+" is not set")
	}
	return ep
}

// Client returns a client for the test DynamoDB.
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	c, err := dynamo.NewClient(context.Background(), dynamo.Config{Endpoint: Endpoint(t)})
	if err != nil {
		t.Fatalf("dynamodb client: %v", err)
	}
	return c
}

// Table creates a table with a unique name from the schema and deletes it
// when the test ends.
func Table(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := schema.Ensure(ctx, c, name); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := c.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Logf("delete table %s: %v", name, err)
		}
	})
	return name
}

// Store returns a store on a fresh table.
func Store(t testing.TB, opts ...dynamo.Option) *dynamo.Store {
	t.Helper()
	c := Client(t)
	return dynamo.New(c, Table(t, c), opts...)
}
