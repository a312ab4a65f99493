package svmtest

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestWeb3Connection: @solana/web3.js's Connection confirms an airdrop and
// a transfer against the harness (web3check.mjs), WebSocket subscription
// included, as it would against a validator.
func TestWeb3Connection(t *testing.T) {
	node := requireNode(t)
	h := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "web3check.mjs")
	cmd.Dir = Dir()
	cmd.Env = append(cmd.Environ(), "C0MPUTE_RPC_URL="+h.URL, "C0MPUTE_WS_URL="+h.WSURL)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("web3check.mjs: %v\n%s", err, out)
	}
}
