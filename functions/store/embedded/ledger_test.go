package embedded_test

import (
	"testing"

	"github.com/c0mpute/c0mpute/functions/store/embedded"
	"github.com/c0mpute/c0mpute/functions/store/storetest"
)

// TestLedgerConformance runs the keeper ledger suite on the embedded store.
func TestLedgerConformance(t *testing.T) {
	storetest.RunLedger(t, func(t *testing.T) storetest.LedgerStore {
		s, err := embedded.Open(t.TempDir()+"/c0.db", embedded.WithNoSync())
		if err != nil {
			t.Fatalf("open embedded store: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
