package devnet_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/infra/testenv"
)

// nodeHarness is node and the JS harness (infra/sdktest/node), for a test
// that needs pkgs from it; it skips (or fails, where components are
// required) when one is missing.
func nodeHarness(t *testing.T, pkgs ...string) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "node", "no node on PATH")
	}
	dir = filepath.Join(moduleRoot(t), "infra", "sdktest", "node")
	for _, pkg := range pkgs {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			testenv.Missing(t, "the npm package "+pkg, "run scripts/test (npm ci in infra/sdktest/node)")
		}
	}
	return node, dir
}

// runNodeTest runs `node --test script` in the harness with env added to
// this process's (its OPENAI_* variables left out), and requires want
// passing tests and no failure. It returns the TAP output.
func runNodeTest(t *testing.T, node, dir, script string, want int, env ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", script)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(append(withoutOpenAIEnv(os.Environ()), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"), env...)
	out, err := cmd.CombinedOutput()
	if pass, fail := tapCount(out, "pass"), tapCount(out, "fail"); err != nil || fail != 0 || pass != want {
		t.Fatalf("node --test %s: %v; pass %d (want %d), fail %d; output:\n%s", script, err, pass, want, fail, out)
	}
	if testing.Verbose() {
		t.Logf("node --test %s:\n%s", script, out)
	}
	return out
}

// keypairJSON is k as solana-keygen writes it: a JSON array of numbers.
func keypairJSON(k solana.PrivateKey) string {
	ints := make([]int, len(k))
	for i, b := range k {
		ints[i] = int(b)
	}
	b, _ := json.Marshal(ints)
	return string(b)
}
