// Package dynamotest gives tests a fresh table on the DynamoDB that
// C0MPUTE_DYNAMODB_ENDPOINT points at: AWS's DynamoDB Local, which
// scripts/test downloads, starts and stops. Without the variable, tests
// skip (or fail, under C0MPUTE_REQUIRE_INTEGRATION=1).
package dynamotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
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

// Counting is a DynamoDB client that counts the calls made through it, by
// operation and the partition key prefix (or index) they touch, for tests
// that count round trips.
type Counting struct {
	*dynamodb.Client
	mu     sync.Mutex
	counts map[string]int
}

// NewCounting wraps c.
func NewCounting(c *dynamodb.Client) *Counting { return &Counting{Client: c, counts: map[string]int{}} }

func (c *Counting) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[op]++
}

// Take returns the counts since the last Take and resets them.
func (c *Counting) Take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.counts
	c.counts = map[string]int{}
	return out
}

// target names what a call touched: the item kind of its key ("JOB", from
// "JOB#…") or its index.
func target(key map[string]types.AttributeValue, index *string) string {
	if index != nil {
		return "index"
	}
	if pk, ok := key[schema.PK].(*types.AttributeValueMemberS); ok {
		kind, _, _ := strings.Cut(pk.Value, "#")
		return kind
	}
	return "?"
}

// GetItem counts and forwards.
func (c *Counting) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.add("GetItem " + target(in.Key, nil))
	return c.Client.GetItem(ctx, in, o...)
}

// PutItem counts and forwards.
func (c *Counting) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	c.add("PutItem " + target(in.Item, nil))
	return c.Client.PutItem(ctx, in, o...)
}

// UpdateItem counts and forwards.
func (c *Counting) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.add("UpdateItem " + target(in.Key, nil))
	return c.Client.UpdateItem(ctx, in, o...)
}

// DeleteItem counts and forwards.
func (c *Counting) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	c.add("DeleteItem " + target(in.Key, nil))
	return c.Client.DeleteItem(ctx, in, o...)
}

// Query counts and forwards.
func (c *Counting) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	op := "Query table"
	if in.IndexName != nil {
		op = "Query index"
	}
	c.add(op)
	return c.Client.Query(ctx, in, o...)
}

// Scan counts and forwards.
func (c *Counting) Scan(ctx context.Context, in *dynamodb.ScanInput, o ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	c.add("Scan")
	return c.Client.Scan(ctx, in, o...)
}

// BatchGetItem counts and forwards.
func (c *Counting) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	c.add("BatchGetItem")
	return c.Client.BatchGetItem(ctx, in, o...)
}

// TransactWriteItems counts and forwards.
func (c *Counting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.add("TransactWriteItems")
	return c.Client.TransactWriteItems(ctx, in, o...)
}

// EnvStore names the store end-to-end suites run on: "dynamodb" for a
// fresh table on DynamoDB Local, anything else for the embedded store.
// scripts/test runs those suites both ways.
const EnvStore = "C0MPUTE_STORE"

// SuiteStore opens the store an end-to-end suite runs on (see EnvStore),
// closed when the test ends.
func SuiteStore(t testing.TB) store.Store {
	t.Helper()
	if os.Getenv(EnvStore) == "dynamodb" {
		return Store(t)
	}
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// SuiteStoreWithDump is SuiteStore with a dump of the store's raw
// contents (every item of the table, or the database file), for the
// privacy checks: what a suite must never write can be searched for.
func SuiteStoreWithDump(t testing.TB) (store.Store, func() []byte) {
	t.Helper()
	if os.Getenv(EnvStore) == "dynamodb" {
		c := Client(t)
		table := Table(t, c)
		return dynamo.New(c, table), func() []byte { return []byte(strings.Join(Items(t, c, table), "\n")) }
	}
	path := filepath.Join(t.TempDir(), "c0.db")
	st, err := embedded.Open(path, embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func() []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// Items is every item of a table (a consistent scan), each as JSON with
// its keys sorted, after drop removed what it names from it.
func Items(t testing.TB, c *dynamodb.Client, table string, drop ...string) []string {
	t.Helper()
	var out []string
	p := dynamodb.NewScanPaginator(c, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatalf("scan %s: %v", table, err)
		}
		for _, item := range page.Items {
			var m map[string]any
			if err := attributevalue.UnmarshalMap(item, &m); err != nil {
				t.Fatalf("scan %s: %v", table, err)
			}
			for _, k := range drop {
				delete(m, k)
			}
			b, _ := json.Marshal(m) // maps marshal with sorted keys
			out = append(out, string(b))
		}
	}
	return out
}
