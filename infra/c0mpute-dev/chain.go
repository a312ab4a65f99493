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
	"strings"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/clients/zerorewards"
	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store/dynamo"
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

	// keys is the folder of the chain's keypair files.
	keys  string
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
	c := &localChain{keys: keys, cmd: cmd, stdin: stdin}
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

// keeperConfigFile is the keeper's configuration for the local chain, in
// the dev runner's home.
const keeperConfigFile = "keeper.json"

// writeKeeperConfig writes home/keeper.json: c0mpute-keeper's
// configuration for this chain and the dev network's store (ledger: a
// file path or dynamodb:TABLE), signing with the chain's treasury key. The
// chain runs neither zero_staking nor zero_rewards, and has no ZERO mint:
// the programs are named by their IDL ids (no stake account is found),
// and the ZERO mint by a keypair kept in the chain's folder, so that its
// address stays the same. It returns the file's absolute path.
func (c *localChain) writeKeeperConfig(home, ledger string) (string, error) {
	zero, err := keepKeypair(filepath.Join(c.keys, "zero-mint.json"))
	if err != nil {
		return "", fmt.Errorf("keeper config: ZERO mint: %w", err)
	}
	cfg := map[string]any{
		"rpc_url":         c.URL,
		"staking_program": zerostaking.ProgramID.String(),
		"rewards_program": zerorewards.ProgramID.String(),
		"zero_mint":       zero.String(),
		"usdc_mint":       c.Mint,
		"store":           ledger,
		"treasury":        c.Treasury,
		"key":             "file:" + filepath.Join(c.keys, "treasury.json"),
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	path, err := filepath.Abs(filepath.Join(home, keeperConfigFile))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return "", fmt.Errorf("keeper config: %w", err)
	}
	return path, nil
}

// keepKeypair is the public key of the keypair file at path (solana-keygen
// JSON), made the first time.
func keepKeypair(path string) (solana.PublicKey, error) {
	if raw, err := os.ReadFile(path); err == nil {
		k, err := onchain.ParseKey(string(raw))
		if err != nil {
			return solana.PublicKey{}, fmt.Errorf("%s: %w", path, err)
		}
		return k.PublicKey(), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return solana.PublicKey{}, err
	}
	k, err := solana.NewRandomPrivateKey()
	if err != nil {
		return solana.PublicKey{}, err
	}
	ints := make([]int, len(k))
	for i, b := range k {
		ints[i] = int(b)
	}
	b, err := json.Marshal(ints)
	if err != nil {
		return solana.PublicKey{}, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return solana.PublicKey{}, err
	}
	return k.PublicKey(), nil
}

// keeperCommand is the command line that dry-runs the keeper's payouts
// with the configuration at path; ledger is its store.
func keeperCommand(path, ledger string) string {
	cmd := "go run ./onchain/cmd/c0mpute-keeper -config " + path + " payouts"
	if strings.HasPrefix(ledger, "dynamodb:") {
		if ep := os.Getenv(dynamo.EnvEndpoint); ep != "" {
			cmd = dynamo.EnvEndpoint + "=" + ep + " " + cmd
		}
	}
	return cmd
}
