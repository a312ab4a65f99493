// Command c0mpute-wallet takes a user from a Solana wallet (a keypair file,
// as solana-keygen writes it) to credits on a c0mpute gateway:
//
//	c0mpute-wallet signin             Sign-In With Solana; prints OPENAI_API_KEY=… for eval
//	c0mpute-wallet deposit AMOUNT     pays AMOUNT USDC with a Solana Pay transfer, waits for
//	                                  finality and has it verified; prints the credits
//	c0mpute-wallet payout-wallet      makes the wallet the payout wallet of the account whose
//	                                  key is OPENAI_API_KEY, by signing the gateway's challenge
//	c0mpute-wallet stake|unstake ZERO, claim [USDC], autocompound on|off
//	                                  staking: the gateway builds the transaction, the command
//	                                  signs it only if it is what it builds itself, and sends it
//
// Settings come from the environment scripts/dev writes to dev.env, or from
// flags: C0MPUTE_DEV_WALLET (-key, the keypair file), OPENAI_BASE_URL (-api,
// the gateway's …/v1 URL), OPENAI_API_KEY (deposit's key), C0MPUTE_RPC_URL
// (-rpc, the chain's JSON-RPC endpoint).
package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"
	"github.com/mr-tron/base58"

	"github.com/c0mpute/c0mpute/functions/siws"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/chain"
)

const usage = `usage: c0mpute-wallet [flags] signin | deposit AMOUNT | payout-wallet |
       stake ZERO | unstake ZERO | claim [USDC] | autocompound on|off

  signin          sign in with the wallet (Sign-In With Solana); prints
                  OPENAI_API_KEY=<a new key>, so: eval "$(c0mpute-wallet signin)"
  deposit AMOUNT  deposit AMOUNT USDC (like 5 or 2.50) from the wallet with a
                  Solana Pay transfer; the gateway credits 100 credits per USDC
  payout-wallet   have the earnings of the account whose key is OPENAI_API_KEY
                  paid to the wallet (-key: any Solana keypair file, a workerd
                  identity too), proven by the wallet's signature
  stake ZERO      stake ZERO (like 1000 or 0.5) from the wallet; it matures in 24 h
  unstake ZERO    take ZERO back (the newest deposits go first)
  claim [USDC]    claim USDC rewards from the reward vault (default: all of them)
  autocompound on|off
                  have the daily reward buy ZERO and stake it, or be paid in USDC
  The staking commands need C0MPUTE_STAKING_PROGRAM, C0MPUTE_REWARDS_PROGRAM,
  C0MPUTE_ZERO_MINT and C0MPUTE_USDC_MINT: the wallet signs nothing else.

flags (defaults from the environment dev.env sets):
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "c0mpute-wallet:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("c0mpute-wallet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	keyFile := fs.String("key", os.Getenv("C0MPUTE_DEV_WALLET"), "the wallet's keypair file (C0MPUTE_DEV_WALLET)")
	apiURL := fs.String("api", os.Getenv("OPENAI_BASE_URL"), "the gateway's API URL, ending in /v1 (OPENAI_BASE_URL)")
	rpcURL := fs.String("rpc", os.Getenv("C0MPUTE_RPC_URL"), "the chain's JSON-RPC endpoint (C0MPUTE_RPC_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("say signin or deposit")
	}
	if *keyFile == "" || *apiURL == "" {
		return errors.New("set -key and -api (or source dev.env: scripts/dev writes it)")
	}
	raw, err := os.ReadFile(*keyFile)
	if err != nil {
		return err
	}
	key, err := onchain.ParseKey(string(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", *keyFile, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := &gateway{base: strings.TrimSuffix(*apiURL, "/"), client: &http.Client{Timeout: 30 * time.Second}}
	switch cmd := fs.Arg(0); cmd {
	case "signin":
		out, err := g.signIn(ctx, key)
		if err != nil {
			return err
		}
		verb := "signed in to"
		if out.Created {
			verb = "made"
		}
		fmt.Fprintf(stderr, "%s account %s; a new API key follows (shown once)\n", verb, out.AccountID)
		fmt.Fprintf(stdout, "OPENAI_API_KEY=%s\n", out.APIKey)
		return nil
	case "deposit":
		if fs.NArg() != 2 {
			return errors.New("say how much: deposit 5")
		}
		if *rpcURL == "" {
			return errors.New("set -rpc (C0MPUTE_RPC_URL) to the chain's JSON-RPC endpoint")
		}
		g.key = os.Getenv("OPENAI_API_KEY")
		if g.key == "" {
			return errors.New(`deposit needs the account's key in OPENAI_API_KEY: eval "$(c0mpute-wallet signin)" first`)
		}
		return deposit(ctx, g, rpc.New(*rpcURL), key, fs.Arg(1), stdout)
	case "payout-wallet":
		g.key = os.Getenv("OPENAI_API_KEY")
		if g.key == "" {
			return errors.New("payout-wallet needs the key of the account to be paid in OPENAI_API_KEY")
		}
		set, err := g.setPayoutWallet(ctx, key, stderr)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "the earnings of account %s are paid to %s\n", set.AccountID, set.Wallet)
		return nil
	case onchain.ActionStake, onchain.ActionUnstake, onchain.ActionClaim, "autocompound":
		if *rpcURL == "" {
			return errors.New("set -rpc (C0MPUTE_RPC_URL) to the chain's JSON-RPC endpoint")
		}
		g.key = os.Getenv("OPENAI_API_KEY")
		if g.key == "" {
			return errors.New(cmd + ` needs the account's key in OPENAI_API_KEY: eval "$(c0mpute-wallet signin)" first`)
		}
		cfg, err := stakingConfig()
		if err != nil {
			return err
		}
		return stake(ctx, g, chain.New(rpc.New(*rpcURL)), cfg, key, cmd, fs.Args()[1:], stdout)
	default:
		return fmt.Errorf("unknown command %q: want signin, deposit, payout-wallet, stake, unstake, claim or autocompound", cmd)
	}
}

// gateway is the c0mpute API.
type gateway struct {
	base, key string
	client    *http.Client
}

// call posts body (JSON) to path and decodes the answer into out, or
// returns the API's error message.
func (g *gateway) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, g.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if g.key != "" {
		req.Header.Set("Authorization", "Bearer "+g.key)
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Message, Code string } `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return &apiError{status: resp.StatusCode, code: e.Error.Code, msg: e.Error.Message}
		}
		return fmt.Errorf("%s %s: HTTP %d", method, path, resp.StatusCode)
	}
	return json.Unmarshal(b, out)
}

type apiError struct {
	status    int
	code, msg string
}

func (e *apiError) Error() string { return e.msg }

type signedIn struct {
	AccountID string `json:"account_id"`
	Created   bool   `json:"created"`
	APIKey    string `json:"api_key"`
}

// signIn asks for a challenge, signs the message the wallet would show,
// and trades it for a new API key.
func (g *gateway) signIn(ctx context.Context, key solana.PrivateKey) (signedIn, error) {
	wallet := key.PublicKey().String()
	var in siws.Input
	if err := g.call(ctx, http.MethodPost, "/auth/siws/challenge", map[string]string{"wallet": wallet}, &in); err != nil {
		return signedIn{}, fmt.Errorf("sign-in challenge: %w", err)
	}
	in.Address = wallet
	msg := siws.Message(in)
	sig := ed25519.Sign(ed25519.PrivateKey(key), []byte(msg))
	var out signedIn
	err := g.call(ctx, http.MethodPost, "/auth/siws/verify",
		map[string]string{"wallet": wallet, "message": msg, "signature": base58.Encode(sig)}, &out)
	if err != nil {
		return signedIn{}, fmt.Errorf("sign-in: %w", err)
	}
	return out, nil
}

type payoutWallet struct {
	AccountID string `json:"account_id"`
	Wallet    string `json:"wallet"`
}

// setPayoutWallet asks for the account's payout-wallet challenge for the
// key's wallet, shows what it signs, signs it and sends the proof.
func (g *gateway) setPayoutWallet(ctx context.Context, key solana.PrivateKey, stderr io.Writer) (payoutWallet, error) {
	wallet := key.PublicKey().String()
	var in siws.Input
	if err := g.call(ctx, http.MethodPost, "/payout-wallet/challenge", map[string]string{"wallet": wallet}, &in); err != nil {
		return payoutWallet{}, fmt.Errorf("payout-wallet challenge: %w", err)
	}
	in.Address = wallet
	msg := siws.Message(in)
	fmt.Fprintf(stderr, "signing with %s: %s\n", wallet, in.Statement)
	sig := ed25519.Sign(ed25519.PrivateKey(key), []byte(msg))
	var out payoutWallet
	err := g.call(ctx, http.MethodPost, "/payout-wallet",
		map[string]string{"wallet": wallet, "message": msg, "signature": base58.Encode(sig)}, &out)
	if err != nil {
		return payoutWallet{}, fmt.Errorf("payout-wallet: %w", err)
	}
	return out, nil
}

// stakingConfig is the programs and mints the environment names: what the
// wallet will sign for, whatever the gateway says.
func stakingConfig() (onchain.Config, error) {
	var c onchain.Config
	for _, f := range []struct {
		env string
		to  *solana.PublicKey
	}{{"C0MPUTE_STAKING_PROGRAM", &c.StakingProgram}, {"C0MPUTE_REWARDS_PROGRAM", &c.RewardsProgram},
		{"C0MPUTE_ZERO_MINT", &c.ZeroMint}, {"C0MPUTE_USDC_MINT", &c.USDCMint}} {
		v := os.Getenv(f.env)
		if v == "" {
			return c, fmt.Errorf("set %s: the staking commands sign only for the programs and mints the environment names", f.env)
		}
		pk, err := solana.PublicKeyFromBase58(v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", f.env, err)
		}
		*f.to = pk
	}
	return c, nil
}

// stakingTx is the gateway's answer to POST /v1/staking/transactions.
type stakingTx struct {
	Amount               string `json:"amount"`
	Transaction          string `json:"transaction"`
	LastValidBlockHeight uint64 `json:"last_valid_block_height"`
}

// stake asks the gateway for the staking transaction of cmd, checks it is
// exactly the one this command builds itself for the same blockhash (a
// gateway cannot slip in another instruction, account or amount), signs
// it, sends it and waits for it.
func stake(ctx context.Context, g *gateway, c *chain.Chain, cfg onchain.Config, key solana.PrivateKey, cmd string, args []string, stdout io.Writer) error {
	wallet := key.PublicKey()
	req := map[string]any{"action": cmd, "wallet": wallet.String()}
	var enabled bool
	switch {
	case cmd == "autocompound":
		if len(args) != 1 || args[0] != "on" && args[0] != "off" {
			return errors.New("say autocompound on or autocompound off")
		}
		enabled = args[0] == "on"
		req["action"], req["enabled"] = onchain.ActionSetAutocompound, enabled
	case cmd == onchain.ActionClaim && len(args) == 0:
		req["amount"] = "all"
	case len(args) == 1:
		units, err := usdcUnits(args[0]) // ZERO and USDC both have 6 decimals
		if err != nil || units == 0 {
			return fmt.Errorf("%s %q: want an amount above 0, like 5 or 0.25", cmd, args[0])
		}
		req["amount"] = strconv.FormatUint(units, 10)
	default:
		return fmt.Errorf("say how much: %s 5", cmd)
	}
	var got stakingTx
	if err := g.call(ctx, http.MethodPost, "/staking/transactions", req, &got); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	tx, err := solana.TransactionFromBase64(got.Transaction)
	if err != nil {
		return fmt.Errorf("%s: the gateway's transaction: %w", cmd, err)
	}
	var amount uint64
	if got.Amount != "" {
		if amount, err = strconv.ParseUint(got.Amount, 10, 64); err != nil {
			return fmt.Errorf("%s: the gateway's amount %q: %w", cmd, got.Amount, err)
		}
	}
	if asked, ok := req["amount"].(string); ok && asked != "all" && asked != got.Amount {
		return fmt.Errorf("%s: the gateway built %s base units, not the %s asked; nothing was signed", cmd, got.Amount, asked)
	}
	want, err := cfg.StakingTx(wallet, req["action"].(string), amount, enabled, tx.Message.RecentBlockhash)
	if err != nil {
		return err
	}
	wb, err := want.Message.MarshalBinary()
	if err != nil {
		return err
	}
	gb, err := tx.Message.MarshalBinary()
	if err != nil {
		return err
	}
	if !bytes.Equal(wb, gb) {
		return fmt.Errorf("%s: the gateway's transaction is not the one this command builds for the programs and mints the environment names; nothing was signed", cmd)
	}
	if _, err := want.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == wallet {
			return &key
		}
		return nil
	}); err != nil {
		return err
	}
	sig, err := c.Send(ctx, want)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	fmt.Fprintf(os.Stderr, "sent %s; waiting for it to land…\n", sig)
	switch o, err := c.Confirm(ctx, sig, got.LastValidBlockHeight); {
	case err != nil:
		return fmt.Errorf("%s %s: %w", cmd, sig, err)
	case o != chain.Landed:
		return fmt.Errorf("%s %s: %v", cmd, sig, o)
	}
	fmt.Fprintf(stdout, "%s: landed in %s\n", cmd, sig)
	return nil
}

type intent struct {
	ID          string `json:"id"`
	Recipient   string `json:"recipient"`
	Mint        string `json:"mint"`
	Reference   string `json:"reference"`
	Memo        string `json:"memo"`
	AmountUSDC  string `json:"amount_usdc"`
	State       string `json:"state"`
	Credits     int64  `json:"credits"`
	CreditedNow *int64 `json:"credited_now"`
}

// deposit makes a deposit intent, pays it with a Solana Pay transfer
// (TransferChecked to the treasury's USDC account, the reference a
// read-only key of the transfer, the memo before it), waits for finality
// and has the gateway verify it.
func deposit(ctx context.Context, g *gateway, client *rpc.Client, key solana.PrivateKey, amount string, stdout io.Writer) error {
	var d intent
	if err := g.call(ctx, http.MethodPost, "/deposits", map[string]json.RawMessage{"amount_usdc": json.RawMessage(`"` + amount + `"`)}, &d); err != nil {
		return fmt.Errorf("deposit: %w", err)
	}
	mint, err := solana.PublicKeyFromBase58(d.Mint)
	if err != nil {
		return fmt.Errorf("deposit %s: mint: %w", d.ID, err)
	}
	treasury, err := solana.PublicKeyFromBase58(d.Recipient)
	if err != nil {
		return fmt.Errorf("deposit %s: recipient: %w", d.ID, err)
	}
	ref, err := solana.PublicKeyFromBase58(d.Reference)
	if err != nil {
		return fmt.Errorf("deposit %s: reference: %w", d.ID, err)
	}
	// The gateway says where and how much to pay: hold it to what the
	// user asked, and to the USDC mint the user's environment names.
	asked, err := usdcUnits(amount)
	if err != nil {
		return err
	}
	units, err := usdcUnits(d.AmountUSDC)
	if err != nil {
		return err
	}
	if units != asked {
		return fmt.Errorf("deposit %s: the gateway asks for %s USDC, not the %s asked for; nothing was sent", d.ID, d.AmountUSDC, amount)
	}
	if want := os.Getenv("C0MPUTE_USDC_MINT"); want != "" && want != d.Mint {
		return fmt.Errorf("deposit %s: the gateway names mint %s, not C0MPUTE_USDC_MINT %s; nothing was sent", d.ID, d.Mint, want)
	}
	memo, err := onchain.Memo(d.Memo)
	if err != nil {
		return err
	}
	owner := key.PublicKey()
	transfer := onchain.TransferChecked(onchain.TokenProgram, onchain.ATA(owner, mint, onchain.TokenProgram), mint,
		onchain.ATA(treasury, mint, onchain.TokenProgram), owner, units, onchain.USDCDecimals)
	accounts := append(transfer.Accounts(), solana.Meta(ref))
	data, err := transfer.Data()
	if err != nil {
		return err
	}
	c := chain.New(client)
	bh, err := c.LatestBlockhash(ctx)
	if err != nil {
		return fmt.Errorf("deposit: blockhash: %w", err)
	}
	tx, err := solana.NewTransaction([]solana.Instruction{memo, solana.NewInstruction(transfer.ProgramID(), accounts, data)},
		bh.Hash, solana.TransactionPayer(owner))
	if err != nil {
		return err
	}
	if _, err := tx.Sign(func(k solana.PublicKey) *solana.PrivateKey {
		if k == owner {
			return &key
		}
		return nil
	}); err != nil {
		return err
	}
	sig, err := c.Send(ctx, tx)
	if err != nil && errors.Is(err, chain.ErrPreflight) {
		return fmt.Errorf("deposit: the transfer was refused (does the wallet hold %s USDC and a little SOL?): %w", d.AmountUSDC, err)
	}
	fmt.Fprintf(os.Stderr, "sent %s USDC to %s in %s; waiting for finality…\n", d.AmountUSDC, treasury, sig)
	if o, err := c.Confirm(ctx, sig, bh.LastValidBlockHeight); err != nil || o != chain.Landed {
		return fmt.Errorf("deposit: transfer %s: %v %v (if it lands, the gateway's sweep credits it)", sig, o, err)
	}
	for {
		err = g.call(ctx, http.MethodPost, "/deposits/"+d.ID+"/verify", map[string]string{"signature": sig.String()}, &d)
		var ae *apiError
		if !errors.As(err, &ae) || ae.code != "not_finalized" {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err != nil {
		return fmt.Errorf("deposit %s: verify: %w", d.ID, err)
	}
	var b struct {
		Credits int64 `json:"credits"`
	}
	if err := g.call(ctx, http.MethodGet, "/balance", nil, &b); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "deposited %s USDC: %d credits added; balance %d credits\n", d.AmountUSDC, *d.CreditedNow, b.Credits)
	return nil
}

// usdcUnits reads an exact decimal amount of USDC ("5", "2.50") into base
// units: digits only, at most 6 decimals.
func usdcUnits(s string) (uint64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	bad := whole == "" || len(frac) > onchain.USDCDecimals ||
		strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != ""
	w, err := strconv.ParseUint(whole, 10, 32)
	if bad || err != nil {
		return 0, fmt.Errorf("amount %q: want a number of USDC like 5 or 2.50 (at most 6 decimals)", s)
	}
	f, _ := strconv.ParseUint((frac + "000000")[:onchain.USDCDecimals], 10, 64)
	return w*1_000_000 + f, nil
}
