package api

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gagliardetto/solana-go"
	"github.com/gagliardetto/solana-go/rpc"

	"github.com/c0mpute/c0mpute/functions/oaiwire"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/stakes"
)

// Staking serves stakers through the product: their stake read from the
// chain (GET /v1/staking) and unsigned transactions their wallet signs
// (POST /v1/staking/transactions), built with the generated clients. The
// gateway never holds a staker's key and sends nothing.
type Staking struct {
	// Config names the programs and mints.
	Config onchain.Config
	Chain  StakingChain
}

// StakingChain is the part of the JSON-RPC client the staking routes use.
type StakingChain interface {
	GetAccountInfoWithOpts(ctx context.Context, account solana.PublicKey, opts *rpc.GetAccountInfoOpts) (*rpc.GetAccountInfoResult, error)
	GetLatestBlockhash(ctx context.Context, commitment rpc.CommitmentType) (*rpc.GetLatestBlockhashResult, error)
}

var errStakingOff = notConfigured("Staking is")

type stakeDepositJSON struct {
	// Amount is ZERO base units (6 decimals), as a string: amounts pass
	// 2^53.
	Amount    string `json:"amount"`
	Time      int64  `json:"time"`
	MaturesAt int64  `json:"matures_at"`
	Matured   bool   `json:"matured"`
}

type stakingJSON struct {
	Object       string `json:"object"`
	Wallet       string `json:"wallet"`
	StakeAccount string `json:"stake_account"`
	// Staked, Matured and Maturing are ZERO base units as strings.
	Staked       string             `json:"staked"`
	Matured      string             `json:"matured"`
	Maturing     string             `json:"maturing"`
	Deposits     []stakeDepositJSON `json:"deposits"`
	Autocompound bool               `json:"autocompound"`
	// RewardVault holds the staker's USDC rewards; Rewards is its balance
	// in USDC base units, a string.
	RewardVault string `json:"reward_vault"`
	Rewards     string `json:"rewards"`
	// AllowanceToday is the account's free credits left today.
	AllowanceToday int64  `json:"allowance_today"`
	ZeroMint       string `json:"zero_mint"`
	Decimals       int    `json:"decimals"`
}

// stakingWallet is the wallet a staking request is about: ?wallet= or the
// body's, else the account's own.
func stakingWallet(a store.Account, asked string) (solana.PublicKey, error) {
	w := asked
	if w == "" {
		w = a.Wallet
	}
	pk, err := solana.PublicKeyFromBase58(w)
	if err != nil {
		return solana.PublicKey{}, oaiwire.InvalidRequest("wallet", "wallet must be a Solana address; this account has none to default to")
	}
	return pk, nil
}

// accountData reads an account's data at confirmed commitment; nil if it
// does not exist.
func (st *Staking) accountData(ctx context.Context, pk solana.PublicKey) ([]byte, error) {
	res, err := st.Chain.GetAccountInfoWithOpts(ctx, pk, &rpc.GetAccountInfoOpts{Encoding: solana.EncodingBase64, Commitment: rpc.CommitmentConfirmed})
	if errors.Is(err, rpc.ErrNotFound) || err == nil && (res == nil || res.Value == nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("api: read %s: %w", pk, err)
	}
	return res.Value.Data.GetBinary(), nil
}

// tokenAmount is a token account's balance from its data (the amount at
// bytes 64..72 of an SPL token account); 0 for none.
func tokenAmount(data []byte) uint64 {
	if len(data) < 72 {
		return 0
	}
	return binary.LittleEndian.Uint64(data[64:72])
}

// staking serves GET /v1/staking?wallet=: the wallet's stake, deposit by
// deposit with when each matures, its auto-compound setting, its reward
// vault's balance and the account's allowance left today.
func (s *Server) staking(w http.ResponseWriter, r *http.Request) error {
	st := s.stakers
	if st == nil {
		return errStakingOff
	}
	a, err := s.store.GetAccount(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	wallet, err := stakingWallet(a, r.URL.Query().Get("wallet"))
	if err != nil {
		return err
	}
	now := s.now()
	c := st.Config
	out := stakingJSON{Object: "staking", Wallet: wallet.String(), StakeAccount: c.StakePDA(wallet).String(),
		Staked: "0", Matured: "0", Maturing: "0", Deposits: []stakeDepositJSON{}, RewardVault: c.RewardVault(wallet).String(),
		Rewards: "0", ZeroMint: c.ZeroMint.String(), Decimals: onchain.ZeroDecimals}
	if a.AllowanceDay == "" || a.AllowanceDay == store.DayOf(now) {
		out.AllowanceToday = a.FreeAllowanceLeft
	}
	data, err := st.accountData(r.Context(), c.StakePDA(wallet))
	if err != nil {
		return err
	}
	if data != nil {
		stake, err := stakes.Decode(data)
		if err != nil {
			return fmt.Errorf("api: stake account of %s: %w", wallet, err)
		}
		matured := stake.Matured(now)
		out.Staked, out.Matured = strconv.FormatUint(stake.Total, 10), strconv.FormatUint(matured, 10)
		out.Maturing, out.Autocompound = strconv.FormatUint(stake.Total-matured, 10), stake.Autocompound
		for _, d := range stake.Deposits {
			at := time.Unix(d.Time, 0)
			out.Deposits = append(out.Deposits, stakeDepositJSON{Amount: strconv.FormatUint(d.Amount, 10), Time: d.Time,
				MaturesAt: at.Add(stakes.Maturity).Unix(), Matured: !now.Before(at.Add(stakes.Maturity))})
		}
	}
	vault, err := st.accountData(r.Context(), c.RewardVault(wallet))
	if err != nil {
		return err
	}
	out.Rewards = strconv.FormatUint(tokenAmount(vault), 10)
	return writeJSON(w, http.StatusOK, out)
}

// stakingTxRequest is POST /v1/staking/transactions' body.
type stakingTxRequest struct {
	Action string `json:"action" validate:"oneof=stake unstake claim set_autocompound"`
	// Amount is base units as a decimal string (ZERO to stake or unstake,
	// USDC to claim; "all" claims the whole reward vault).
	Amount string `json:"amount,omitempty" validate:"omitempty,max=20"`
	// Enabled is set_autocompound's setting.
	Enabled *bool `json:"enabled,omitempty"`
	// Wallet is the staker (default: the account's wallet); it pays the
	// fee and signs.
	Wallet string `json:"wallet,omitempty" validate:"omitempty,max=44"`
}

type stakingTxJSON struct {
	Object string `json:"object"`
	Action string `json:"action"`
	Wallet string `json:"wallet"`
	Amount string `json:"amount,omitempty"`
	// Transaction is the unsigned v0 transaction, base64, for the wallet's
	// signTransaction; it is valid until LastValidBlockHeight.
	Transaction          string `json:"transaction"`
	LastValidBlockHeight uint64 `json:"last_valid_block_height"`
}

// maxStakingBody bounds a staking transaction request.
const maxStakingBody = 4 << 10

// stakingTransaction serves POST /v1/staking/transactions: an unsigned v0
// transaction doing action for the wallet, which pays its fee; the gateway
// keeps nothing of it.
func (s *Server) stakingTransaction(w http.ResponseWriter, r *http.Request) error {
	st := s.stakers
	if st == nil {
		return errStakingOff
	}
	var req stakingTxRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxStakingBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return oaiwire.InvalidRequest("", "the body is {action, amount?, enabled?, wallet?}: "+err.Error())
	}
	if err := validate.Struct(req); err != nil {
		return oaiwire.InvalidRequest("action", "action is stake, unstake, claim or set_autocompound; amount a decimal string of at most 20 digits; wallet a Solana address")
	}
	a, err := s.store.GetAccount(r.Context(), who(r).account)
	if err != nil {
		return err
	}
	wallet, err := stakingWallet(a, req.Wallet)
	if err != nil {
		return err
	}
	c := st.Config
	var amount uint64
	if req.Action != "set_autocompound" {
		if req.Action == "claim" && req.Amount == "all" {
			vault, err := st.accountData(r.Context(), c.RewardVault(wallet))
			if err != nil {
				return err
			}
			amount = tokenAmount(vault)
			if amount == 0 {
				return &oaiwire.Error{Status: http.StatusConflict, Type: oaiwire.TypeInvalidRequest, Code: "nothing_to_claim",
					Message: "The reward vault of " + wallet.String() + " holds no USDC."}
			}
		} else if amount, err = strconv.ParseUint(req.Amount, 10, 64); err != nil || amount == 0 {
			return oaiwire.InvalidRequest("amount", "amount is a whole number of base units above 0, as a string (claim also takes \"all\")")
		}
	} else if req.Enabled == nil {
		return oaiwire.InvalidRequest("enabled", "set_autocompound needs enabled: true or false")
	}
	bh, err := st.Chain.GetLatestBlockhash(r.Context(), rpc.CommitmentConfirmed)
	if err != nil {
		return fmt.Errorf("api: latest blockhash: %w", err)
	}
	tx, err := c.StakingTx(wallet, req.Action, amount, req.Enabled != nil && *req.Enabled, bh.Value.Blockhash)
	if err != nil {
		return err
	}
	b64, err := onchain.Unsigned(tx)
	if err != nil {
		return err
	}
	out := stakingTxJSON{Object: "staking_transaction", Action: req.Action, Wallet: wallet.String(), Transaction: b64,
		LastValidBlockHeight: bh.Value.LastValidBlockHeight}
	if amount > 0 {
		out.Amount = strconv.FormatUint(amount, 10)
	}
	return writeJSON(w, http.StatusOK, out)
}
