package keepercli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

// FuzzLoadConfig: any file content is a validated config or an error.
func FuzzLoadConfig(f *testing.F) {
	f.Add([]byte(`{"rpc_url":"http://127.0.0.1:8899","staking_program":"11111111111111111111111111111111","rewards_program":"11111111111111111111111111111111","zero_mint":"11111111111111111111111111111111","usdc_mint":"11111111111111111111111111111111","store":"x.db","key":"file:k.json"}`))
	f.Add([]byte(`{"key":"env:X"}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "c.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := keepercli.LoadConfig(path)
		if err == nil && (c.RPCURL == "" || c.Key == "" && c.Treasury == "" || c.AllowanceCapBP > 10_000) {
			t.Fatalf("invalid config accepted: %+v", c)
		}
	})
}

// FuzzLoadKey: any secret is a valid 64-byte keypair or an error.
func FuzzLoadKey(f *testing.F) {
	f.Add("[1,2,3]")
	f.Add("4Z7cXSyeFR8wNGMVXUE1TwtKn5D5Vu7FzEv69dokLv7KrQk7h6pu4LF8ZRR9yQBhc7uSM6RTTZtU1fmaxiNrxXrs")
	f.Fuzz(func(t *testing.T, secret string) {
		k, err := keepercli.LoadKey(context.Background(), "ssm:k", func(context.Context, string, string) (string, error) { return secret, nil })
		if err == nil && (len(k) != 64 || k.Validate() != nil) {
			t.Fatal("invalid key accepted")
		}
	})
}
