package store_test

import (
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/functions/store/storetest"
	"github.com/c0mpute/c0mpute/infra/dynamotest"
)

// TestStoreConformance runs the one conformance suite against every store
// implementation, so the gateway behaves the same on one machine and in AWS.
func TestStoreConformance(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			// The suite checks semantics, not durability: without fsync
			// it takes seconds instead of depending on a shared disk's
			// flush latency, and the code paths are the same.
			s, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
			if err != nil {
				t.Fatalf("open embedded store: %v", err)
			}
			return s
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		dynamotest.Endpoint(t) // skip at once, not in every subtest
		storetest.Run(t, func(t *testing.T) store.Store { return dynamotest.Store(t) })
	})
}

// TestLedgerConformance runs the keeper ledger's suite against every store.
func TestLedgerConformance(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		storetest.RunLedger(t, func(t *testing.T) storetest.LedgerStore {
			s, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
			if err != nil {
				t.Fatalf("open embedded store: %v", err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		dynamotest.Endpoint(t)
		storetest.RunLedger(t, func(t *testing.T) storetest.LedgerStore { return dynamotest.Store(t) })
	})
}
