package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/x402"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/deposit"
)

// Variables of the local chain.
const (
	// envChain is "local" to run a development chain with the network.
	envChain = "C0MPUTE_CHAIN"
	// envChainAddr is where it listens (solana-test-validator's port by
	// default, where Solana tools look first).
	envChainAddr = "C0MPUTE_CHAIN_ADDR"
)

// localChain is the development chain: the LiteSVM JSON-RPC server of
// onchain/svmtest run with --dev, which makes a test USDC mint, the
// treasury, a fee payer for x402 top-ups and a funded dev wallet. The chain
// starts empty on each run; the keypairs (so the addresses) are kept in
// home/chain.
type localChain struct {
	URL          string `json:"url"`
	Mint         string `json:"usdc_mint"`
	Treasury     string `json:"treasury"`
	FeePayer     string `json:"fee_payer"`
	FeePayerKey  string `json:"fee_payer_key"`
	DevWallet    string `json:"dev_wallet"`
	DevWalletKey string `json:"dev_wallet_key"`

	cmd   *exec.Cmd
	stdin io.Closer
}

// startChain runs the chain's server from dir (onchain/svmtest) on addr
// and waits for it to answer.
func startChain(ctx context.Context, dir, home, addr string) (*localChain, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("%s=local needs Node.js on PATH: %w", envChain, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "litesvm", "package.json")); err != nil {
		return nil, fmt.Errorf("%s=local needs the chain's npm packages: run `npm ci` in %s (scripts/dev does)", envChain, dir)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		return nil, fmt.Errorf("%s=%q: want 127.0.0.1:PORT (the chain serves this machine only)", envChainAddr, addr)
	}
	keys, err := filepath.Abs(filepath.Join(home, "chain"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(node, "server.mjs", "--dev", keys, "--port", port)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	// The server exits when its stdin closes: with this process, however
	// it ends.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the local chain: %w", err)
	}
	c := &localChain{cmd: cmd, stdin: stdin}
	line := make(chan error, 1)
	go func() {
		s := bufio.NewScanner(out)
		if !s.Scan() {
			line <- fmt.Errorf("the local chain exited before it listened (is %s free?)", addr)
			return
		}
		line <- json.Unmarshal(s.Bytes(), c)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case err = <-line:
	case <-time.After(30 * time.Second):
		err = errors.New("the local chain did not start in 30 s")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil && (c.URL == "" || c.Mint == "" || c.FeePayerKey == "") {
		err = errors.New("the local chain did not name its accounts (an old server.mjs?)")
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close stops the chain.
func (c *localChain) Close() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
	}
}

// payments are the deposit and top-up routes' configuration on this chain.
// Top-ups name the chain Solana devnet: x402 clients know only the public
// clusters' ids.
func (c *localChain) payments() (*api.Deposits, *api.TopUps, error) {
	mint, err := solana.PublicKeyFromBase58(c.Mint)
	if err != nil {
		return nil, nil, fmt.Errorf("local chain mint: %w", err)
	}
	treasury, err := solana.PublicKeyFromBase58(c.Treasury)
	if err != nil {
		return nil, nil, fmt.Errorf("local chain treasury: %w", err)
	}
	raw, err := os.ReadFile(c.FeePayerKey)
	if err != nil {
		return nil, nil, err
	}
	feePayer, err := onchain.ParseKey(string(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("local chain fee payer: %w", err)
	}
	network, err := x402.Network("devnet")
	if err != nil {
		return nil, nil, err
	}
	client := rpc.New(c.URL)
	deposits := &api.Deposits{Mint: mint, Treasury: treasury, Label: "c0mpute (local chain)", Lister: client,
		Verifier: &deposit.Verifier{RPC: client, Config: onchain.Config{USDCMint: mint, Treasury: treasury}}}
	return deposits, &api.TopUps{Network: network, FeePayer: feePayer, Chain: client}, nil
}

// envLines are the dev.env lines that point tools at the chain.
func (c *localChain) envLines() string {
	return fmt.Sprintf("C0MPUTE_RPC_URL=%s\nC0MPUTE_USDC_MINT=%s\nC0MPUTE_TREASURY=%s\nC0MPUTE_DEV_WALLET=%s\n",
		c.URL, c.Mint, c.Treasury, c.DevWalletKey)
}
