package onchain_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	bin "github.com/gagliardetto/binary"
	"github.com/gagliardetto/solana-go"

	"github.com/c0mpute/c0mpute/clients/zerorewards"
	"github.com/c0mpute/c0mpute/clients/zerostaking"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// key is a deterministic public key for a label.
func key(label string) solana.PublicKey {
	return solana.PublicKeyFromBytes(func() []byte { h := sha256.Sum256([]byte(label)); return h[:] }())
}

// idlConfig uses the programs' IDL addresses; otherConfig deploys them
// elsewhere, to show that the program ids are configuration.
var (
	idlConfig = onchain.Config{
		StakingProgram: zerostaking.ProgramID,
		RewardsProgram: zerorewards.ProgramID,
		ZeroMint:       key("zero mint"),
		USDCMint:       key("usdc mint"),
		Treasury:       key("treasury"),
	}
	otherConfig = func() onchain.Config {
		c := idlConfig
		c.StakingProgram = key("staking deployed elsewhere")
		c.RewardsProgram = key("rewards deployed elsewhere")
		return c
	}()
)

type ixCase struct {
	name     string
	idl      string
	anchor   svmtest.Case
	build    func(c onchain.Config) (solana.Instruction, error)
	override bool
}

func ixCases() []ixCase {
	owner, payer, keeper := key("owner"), key("payer"), key("keeper")
	payerZero, keeperUSDC := key("payer zero"), key("keeper usdc")
	var out []ixCase
	for _, amount := range []uint64{1, 1_000_000, 18446744073709551615} {
		a := formatU(amount)
		out = append(out,
			ixCase{name: "stake/" + a, idl: "zero_staking",
				anchor: svmtest.Case{Kind: "instruction", Name: "stake", Args: map[string]any{"amount": a},
					Accounts: map[string]string{"payer": payer.String(), "owner": owner.String(), "payer_token_account": payerZero.String(), "zero_mint": idlConfig.ZeroMint.String()}},
				build: func(c onchain.Config) (solana.Instruction, error) { return c.Stake(payer, owner, payerZero, amount) }},
			ixCase{name: "unstake/" + a, idl: "zero_staking",
				anchor: svmtest.Case{Kind: "instruction", Name: "unstake", Args: map[string]any{"amount": a},
					Accounts: map[string]string{"owner": owner.String(), "owner_token_account": idlConfig.ZeroATA(owner).String(), "zero_mint": idlConfig.ZeroMint.String()}},
				build: func(c onchain.Config) (solana.Instruction, error) { return c.Unstake(owner, amount) }},
			ixCase{name: "fund/" + a, idl: "zero_rewards",
				anchor: svmtest.Case{Kind: "instruction", Name: "fund", Args: map[string]any{"amount": a},
					Accounts: map[string]string{"keeper": keeper.String(), "owner": owner.String(), "keeper_token_account": keeperUSDC.String(), "usdc_mint": idlConfig.USDCMint.String()}},
				build: func(c onchain.Config) (solana.Instruction, error) { return c.Fund(keeper, keeperUSDC, owner, amount) }},
			ixCase{name: "claim/" + a, idl: "zero_rewards",
				anchor: svmtest.Case{Kind: "instruction", Name: "claim", Args: map[string]any{"amount": a},
					Accounts: map[string]string{"owner": owner.String(), "owner_token_account": idlConfig.USDCATA(owner).String(), "usdc_mint": idlConfig.USDCMint.String()}},
				build: func(c onchain.Config) (solana.Instruction, error) { return c.Claim(owner, amount) }},
		)
	}
	for _, on := range []bool{true, false} {
		out = append(out, ixCase{name: "set_autocompound/" + formatBool(on), idl: "zero_staking",
			anchor: svmtest.Case{Kind: "instruction", Name: "set_autocompound", Args: map[string]any{"enabled": on},
				Accounts: map[string]string{"owner": owner.String()}},
			build: func(c onchain.Config) (solana.Instruction, error) { return c.SetAutocompound(owner, on) }})
	}
	return out
}

func formatU(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func formatBool(v bool) string {
	if v {
		return "on"
	}
	return "off"
}

// encodedIx is an instruction as the golden file and Anchor describe it.
type encodedIx struct {
	Program string         `json:"program"`
	Data    string         `json:"data"`
	Keys    []svmtest.Meta `json:"keys"`
}

func describe(ix solana.Instruction) (encodedIx, error) {
	data, err := ix.Data()
	if err != nil {
		return encodedIx{}, err
	}
	e := encodedIx{Program: ix.ProgramID().String(), Data: hex.EncodeToString(data)}
	for _, m := range ix.Accounts() {
		e.Keys = append(e.Keys, svmtest.Meta{Pubkey: m.PublicKey.String(), Signer: m.IsSigner, Writable: m.IsWritable})
	}
	return e, nil
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got any) {
	t.Helper()
	b, err := json.MarshalIndent(got, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with -update to create): %v", err)
	}
	if !bytes.Equal(want, b) {
		t.Errorf("%s differs from the encoding; run go test -update after checking the change\ngot:\n%s", path, b)
	}
}

// TestInstructionEncodingGolden pins every instruction's encoding, so a
// change shows up without Node.
func TestInstructionEncodingGolden(t *testing.T) {
	got := map[string]encodedIx{}
	for _, tc := range ixCases() {
		for cfgName, cfg := range map[string]onchain.Config{"idl": idlConfig, "other": otherConfig} {
			ix, err := tc.build(cfg)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			e, err := describe(ix)
			if err != nil {
				t.Fatal(err)
			}
			got[cfgName+"/"+tc.name] = e
		}
	}
	golden(t, "instructions.golden.json", got)
}

// TestInstructionsMatchAnchor builds every instruction of both IDLs with
// the generated Go clients (through onchain's builders, which derive the
// PDAs and ATAs) and with @coral-xyz/anchor, which resolves the PDAs and
// fixed addresses from the IDL itself: the data and the account metas must
// be identical, at the IDL's program ids and at other ones.
func TestInstructionsMatchAnchor(t *testing.T) {
	for _, cfg := range []struct {
		name string
		c    onchain.Config
	}{{"idl", idlConfig}, {"other", otherConfig}} {
		t.Run(cfg.name, func(t *testing.T) {
			for _, idl := range []string{"zero_staking", "zero_rewards"} {
				var cases []ixCase
				var anchorCases []svmtest.Case
				for _, tc := range ixCases() {
					if tc.idl == idl {
						cases = append(cases, tc)
						anchorCases = append(anchorCases, tc.anchor)
					}
				}
				address := cfg.c.StakingProgram.String()
				if idl == "zero_rewards" {
					address = cfg.c.RewardsProgram.String()
				}
				want := svmtest.Encode(t, svmtest.IDL(idl), address, anchorCases)
				for i, tc := range cases {
					ix, err := tc.build(cfg.c)
					if err != nil {
						t.Fatalf("%s: %v", tc.name, err)
					}
					got, err := describe(ix)
					if err != nil {
						t.Fatal(err)
					}
					w := encodedIx{Program: want[i].Program, Data: want[i].Data, Keys: want[i].Keys}
					gj, _ := json.Marshal(got)
					wj, _ := json.Marshal(w)
					if !bytes.Equal(gj, wj) {
						t.Errorf("%s: Go and Anchor differ\n go:     %s\n anchor: %s", tc.name, gj, wj)
					}
				}
			}
		})
	}
}

// TestAccountsAndEventsMatchAnchor encodes every account and event type of
// both IDLs in Go (discriminator + generated Marshal) and with Anchor's
// coders: identical bytes, and the generated parsers read Anchor's bytes
// back to the same values.
func TestAccountsAndEventsMatchAnchor(t *testing.T) {
	owner, payer := key("owner"), key("payer")
	stake := zerostaking.StakeAccount{Owner: owner, Bump: 254, Autocompound: true, Total: 3_000_001,
		Deposits: []zerostaking.Deposit{{Amount: 1, Time: 1_700_000_000}, {Amount: 3_000_000, Time: -1}}}
	emptyStake := zerostaking.StakeAccount{Owner: payer, Bump: 1}
	reward := zerorewards.RewardAccount{Owner: owner, Bump: 255, TotalFunded: 18446744073709551615, TotalClaimed: 7}
	deps := func(s zerostaking.StakeAccount) []any {
		out := []any{}
		for _, d := range s.Deposits {
			out = append(out, map[string]any{"amount": formatU(d.Amount), "time": itoa(d.Time)})
		}
		return out
	}
	stakeValue := func(s zerostaking.StakeAccount) map[string]any {
		return map[string]any{"owner": s.Owner.String(), "bump": s.Bump, "autocompound": s.Autocompound,
			"total": formatU(s.Total), "deposits": deps(s)}
	}
	type goCase struct {
		anchor svmtest.Case
		bytes  func() ([]byte, error)
		parse  func([]byte) (any, error)
		want   any
	}
	withDisc := func(d [8]byte, m interface{ Marshal() ([]byte, error) }) func() ([]byte, error) {
		return func() ([]byte, error) {
			b, err := m.Marshal()
			return append(d[:], b...), err
		}
	}
	staking := []goCase{
		{svmtest.Case{Kind: "account", Name: "StakeAccount", Value: stakeValue(stake)}, withDisc(zerostaking.Account_StakeAccount, stake),
			func(b []byte) (any, error) { return zerostaking.ParseAccount_StakeAccount(b) }, &stake},
		{svmtest.Case{Kind: "account", Name: "StakeAccount", Value: stakeValue(emptyStake)}, withDisc(zerostaking.Account_StakeAccount, emptyStake),
			func(b []byte) (any, error) { return zerostaking.ParseAccount_StakeAccount(b) }, &emptyStake},
	}
	ev1 := zerostaking.Staked{Owner: owner, Payer: payer, Amount: 42, Time: 1_800_000_000}
	ev2 := zerostaking.Unstaked{Owner: owner, Amount: 41, Time: 1_800_000_001}
	ev3 := zerostaking.AutocompoundSet{Owner: owner, Enabled: true}
	staking = append(staking,
		goCase{svmtest.Case{Kind: "event", Name: "Staked", Value: map[string]any{"owner": owner.String(), "payer": payer.String(), "amount": "42", "time": "1800000000"}},
			withDisc(zerostaking.Event_Staked, ev1), func(b []byte) (any, error) { return zerostaking.ParseEvent_Staked(b) }, &ev1},
		goCase{svmtest.Case{Kind: "event", Name: "Unstaked", Value: map[string]any{"owner": owner.String(), "amount": "41", "time": "1800000001"}},
			withDisc(zerostaking.Event_Unstaked, ev2), func(b []byte) (any, error) { return zerostaking.ParseEvent_Unstaked(b) }, &ev2},
		goCase{svmtest.Case{Kind: "event", Name: "AutocompoundSet", Value: map[string]any{"owner": owner.String(), "enabled": true}},
			withDisc(zerostaking.Event_AutocompoundSet, ev3), func(b []byte) (any, error) { return zerostaking.ParseEvent_AutocompoundSet(b) }, &ev3},
	)
	ev4 := zerorewards.Funded{Owner: owner, Amount: 9, TotalFunded: 10}
	ev5 := zerorewards.Claimed{Owner: owner, Amount: 3}
	rewards := []goCase{
		{svmtest.Case{Kind: "account", Name: "RewardAccount", Value: map[string]any{"owner": owner.String(), "bump": 255, "total_funded": "18446744073709551615", "total_claimed": "7"}},
			withDisc(zerorewards.Account_RewardAccount, reward), func(b []byte) (any, error) { return zerorewards.ParseAccount_RewardAccount(b) }, &reward},
		{svmtest.Case{Kind: "event", Name: "Funded", Value: map[string]any{"owner": owner.String(), "amount": "9", "total_funded": "10"}},
			withDisc(zerorewards.Event_Funded, ev4), func(b []byte) (any, error) { return zerorewards.ParseEvent_Funded(b) }, &ev4},
		{svmtest.Case{Kind: "event", Name: "Claimed", Value: map[string]any{"owner": owner.String(), "amount": "3"}},
			withDisc(zerorewards.Event_Claimed, ev5), func(b []byte) (any, error) { return zerorewards.ParseEvent_Claimed(b) }, &ev5},
	}
	for idl, cases := range map[string][]goCase{"zero_staking": staking, "zero_rewards": rewards} {
		var ac []svmtest.Case
		for _, c := range cases {
			ac = append(ac, c.anchor)
		}
		want := svmtest.Encode(t, svmtest.IDL(idl), "", ac)
		for i, c := range cases {
			got, err := c.bytes()
			if err != nil {
				t.Fatalf("%s %s: %v", idl, c.anchor.Name, err)
			}
			if hex.EncodeToString(got) != want[i].Data {
				t.Errorf("%s %s: Go %x, Anchor %s", idl, c.anchor.Name, got, want[i].Data)
			}
			ab, _ := hex.DecodeString(want[i].Data)
			parsed, err := c.parse(ab)
			if err != nil {
				t.Fatalf("%s %s: parse Anchor's bytes: %v", idl, c.anchor.Name, err)
			}
			pj, _ := json.Marshal(parsed)
			wj, _ := json.Marshal(c.want)
			if !bytes.Equal(pj, wj) {
				t.Errorf("%s %s: parsed %s, want %s", idl, c.anchor.Name, pj, wj)
			}
		}
	}
	_ = bin.NewBorshDecoder
}

func itoa(v int64) string {
	b, _ := json.Marshal(v)
	return string(b)
}
