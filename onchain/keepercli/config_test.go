package keepercli_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/onchain/keeper"
	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

// goodConfig is a valid configuration file's keys.
func goodConfig() map[string]any {
	return map[string]any{"rpc_url": "http://127.0.0.1:8899", "staking_program": solana.SystemProgramID.String(),
		"rewards_program": solana.SystemProgramID.String(), "zero_mint": solana.SystemProgramID.String(),
		"usdc_mint": solana.SystemProgramID.String(), "store": "/tmp/x.db", "key": "file:/k.json"}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoadConfigErrors: each mistake an operator makes is named by its
// JSON key (or line and column), with what the key accepts; never a Go
// field name or a validator tag.
func TestLoadConfigErrors(t *testing.T) {
	with := func(change func(m map[string]any)) string {
		m := goodConfig()
		change(m)
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, file string
		want       string
	}{
		{"not a URL", with(func(m map[string]any) { m["rpc_url"] = "x" }),
			`keeper.json: "rpc_url": must be an http(s) URL (the Solana JSON-RPC endpoint), got "x"`},
		{"not http", with(func(m map[string]any) { m["rpc_url"] = "ftp://node.example" }),
			`keeper.json: "rpc_url": must be an http(s) URL (the Solana JSON-RPC endpoint), got "ftp://node.example"`},
		{"no rpc", with(func(m map[string]any) { delete(m, "rpc_url") }),
			`keeper.json: "rpc_url" is missing: the Solana JSON-RPC endpoint, an http(s) URL, e.g. https://api.devnet.solana.com`},
		{"bad pubkey", with(func(m map[string]any) { m["zero_mint"] = "not base58!" }),
			`keeper.json: "zero_mint": must be a base58 public key (the ZERO mint (Token-2022)), got "not base58!"`},
		{"env key, not echoed", with(func(m map[string]any) { m["key"] = "env:KEEPER_KEY" }),
			`keeper.json: "key": must start with file:, secretsmanager: or ssm: and name the key file, secret or parameter, got a value of 14 characters`},
		{"a key pasted in, not echoed", with(func(m map[string]any) { m["key"] = "4Z7cXSyeFR8wNGMVXUE1TwtKn5D5Vu7Fz" }),
			`keeper.json: "key": must start with file:, secretsmanager: or ssm: and name the key file, secret or parameter, got a value of 33 characters`},
		{"neither key nor treasury", with(func(m map[string]any) { delete(m, "key") }),
			`keeper.json: set "treasury" (the keeper wallet's public key, all a dry run needs, a base58 public key) or "key" (where the signing key is, needed by -execute: file:PATH, secretsmanager:SECRET-ID or ssm:PARAMETER-NAME), or both`},
		{"bad treasury", with(func(m map[string]any) { m["treasury"] = "Treasury" }),
			`keeper.json: "treasury": must be a base58 public key (the keeper wallet's public key, all a dry run needs), got "Treasury"`},
		{"dynamodb without a table", with(func(m map[string]any) { m["store"] = "dynamodb:" }),
			`keeper.json: "store": must be a file path (the embedded store) or dynamodb:TABLE, got "dynamodb:"`},
		{"cap above 100%", with(func(m map[string]any) { m["allowance_cap_bp"] = 10001 }),
			`keeper.json: "allowance_cap_bp": must be at most 10000 (basis points, 0 to 10000), got 10001`},
		{"negative pool", with(func(m map[string]any) { m["allowance_pool"] = -1 }),
			`keeper.json: "allowance_pool": must be at least 0 (credits, 0 or more), got -1`},
		{"zero boost minimum", with(func(m map[string]any) { m["stake_boost_min"] = 0 }),
			`keeper.json: "stake_boost_min": must be more than 0 (ZERO base units, more than 0 (500000000000 = 500,000 ZERO)), got 0`},
		{"two mistakes, two lines", with(func(m map[string]any) { m["rpc_url"] = "x"; m["slippage_bp"] = 6000 }),
			"keeper.json: \"rpc_url\": must be an http(s) URL (the Solana JSON-RPC endpoint), got \"x\"\n" +
				`keeper.json: "slippage_bp": must be at most 5000 (basis points, 0 to 5000), got 6000`},
		{"unknown key, a likely typo", with(func(m map[string]any) { m["rpc"] = "http://x" }),
			`keeper.json: unknown key "rpc" (did you mean "rpc_url"?); the keys are allowance_cap_bp, allowance_pool, fee_source, key, priority_fee_cap, pumpswap_pool, rewards_program, rpc_url, slippage_bp, stake_boost_min, staking_program, store, treasury, usdc_mint, zero_mint`},
		{"unknown key, nothing like it", with(func(m map[string]any) { m["private_key"] = "x" }),
			`keeper.json: unknown key "private_key"; the keys are allowance_cap_bp, allowance_pool, fee_source, key, priority_fee_cap, pumpswap_pool, rewards_program, rpc_url, slippage_bp, stake_boost_min, staking_program, store, treasury, usdc_mint, zero_mint`},
		{"a string for a number", "{\n  \"slippage_bp\": \"100\"\n}",
			`keeper.json: line 2: "slippage_bp": must be a whole number, 0 or more, got a string`},
		{"a negative unsigned", "{\n  \"priority_fee_cap\": -5\n}",
			`keeper.json: line 2: "priority_fee_cap": must be a whole number, 0 or more, got number -5`},
		{"syntax: a stray comma", "{\n  \"rpc_url\": \"http://x\",\n}",
			`keeper.json: line 3, column 1: JSON syntax: invalid character '}' looking for beginning of object key string`},
		{"syntax: a comment", "{\n  // the node\n  \"rpc_url\": \"http://x\"\n}",
			`keeper.json: line 2, column 3: JSON syntax: invalid character '/' looking for beginning of object key string`},
		{"not an object", `["rpc_url"]`,
			`keeper.json: line 1, column 1: want a JSON object of keys (see onchain/keepercli/keeper.example.json), got an array`},
		{"empty", "", `keeper.json: empty: want a JSON object (see onchain/keepercli/keeper.example.json)`},
		{"cut short", `{"rpc_url": "http://x"`, `keeper.json: the JSON ends early (an unclosed brace or string?)`},
		{"two objects", with(func(map[string]any) {}) + "\n{}",
			`keeper.json: line 10, column 1: unexpected data after the JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keeper.json")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := keepercli.LoadConfig(path)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.file)
			}
			if got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""); got != tc.want {
				t.Errorf("error\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestLoadConfigAccepts: a dry run's configuration (treasury, no key), an
// execution's (key), both; the defaults fill what a file leaves out.
func TestLoadConfigAccepts(t *testing.T) {
	for name, change := range map[string]func(m map[string]any){
		"key only":      func(map[string]any) {},
		"treasury only": func(m map[string]any) { delete(m, "key"); m["treasury"] = solana.SystemProgramID.String() },
		"both":          func(m map[string]any) { m["treasury"] = solana.SystemProgramID.String() },
		"dynamodb":      func(m map[string]any) { m["store"] = "dynamodb:c0mpute" },
		"https, a path": func(m map[string]any) { m["rpc_url"] = "https://rpc.example/v1/abc" },
	} {
		m := goodConfig()
		change(m)
		b, _ := json.Marshal(m)
		c, err := keepercli.LoadConfig(writeFile(t, "keeper.json", string(b)))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if c.AllowancePool != 5000 || c.AllowanceCapBP != 2500 || c.SlippageBP != 100 || c.PriorityFeeCap != 1_000_000 || c.StakeBoostMin != keeper.DefaultBoostMin {
			t.Errorf("%s: defaults not applied: %+v", name, c)
		}
	}
}

// TestExampleConfigLoads: keeper.example.json sets every key the
// configuration has, and validates.
func TestExampleConfigLoads(t *testing.T) {
	c, err := keepercli.LoadConfig("keeper.example.json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("keeper.example.json")
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(c)
	var want map[string]any
	if err := json.Unmarshal(all, &want); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		if _, ok := keys[k]; !ok {
			t.Errorf("keeper.example.json does not show %q", k)
		}
	}
	if c.Treasury == "" || c.Key == "" {
		t.Errorf("the example should show both treasury and key: %+v", c)
	}
}
