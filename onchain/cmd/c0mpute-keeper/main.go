// Command c0mpute-keeper runs the keeper's on-chain jobs once: the 15:00
// UTC rewards split, the 00:00 UTC staker allowance and worker payouts.
// Dry run by default; see keepercli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/c0mpute/c0mpute/onchain/keepercli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := keepercli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, keepercli.AWSSecrets)
	stop()
	os.Exit(code)
}
