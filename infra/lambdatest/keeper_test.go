package lambdatest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/c0mpute/c0mpute/functions/cmd/keeper/keeperfn"
	"github.com/c0mpute/c0mpute/onchain"
	"github.com/c0mpute/c0mpute/onchain/svmtest"
)

// TestKeeperUnderRIE runs the keeper bootstrap under the emulator against
// the SVM harness (LiteSVM behind JSON-RPC): the golden Scheduler event
// for the 00:00 UTC allowance, and a payouts event with an owed list, both
// dry runs. The function must answer with the plan for the scheduled day
// and move nothing on chain.
func TestKeeperUnderRIE(t *testing.T) {
	rie := RequireRIE(t)
	e := svmtest.NewEnv(t)
	kp := svmtest.NewKey(t)
	e.Airdrop(t, kp.PublicKey(), 10_000_000_000)
	e.MintTo(t, e.Config.USDCMint, onchain.TokenProgram, kp.PublicKey(), 50_000_000)
	worker := svmtest.NewKey(t).PublicKey()

	keyFile := filepath.Join(t.TempDir(), "keeper-key.json")
	ints := make([]int, len(kp))
	for i, b := range kp {
		ints[i] = int(b)
	}
	kb, _ := json.Marshal(ints)
	if err := os.WriteFile(keyFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	// As Terraform writes it: keepercli's settings, optional ones null.
	cfg, _ := json.Marshal(map[string]any{"rpc_url": e.URL, "staking_program": e.Config.StakingProgram.String(),
		"rewards_program": e.Config.RewardsProgram.String(), "zero_mint": e.Config.ZeroMint.String(),
		"usdc_mint": e.Config.USDCMint.String(), "pumpswap_pool": nil, "slippage_bp": nil})
	tmp := t.TempDir()
	emu := Start(t, rie, Bootstrap(t, "keeper"), map[string]string{
		keeperfn.EnvConfig: string(cfg), keeperfn.EnvKeyFile: keyFile, keeperfn.EnvExecute: "false",
		keeperfn.EnvLogLevel: "debug", "TMPDIR": tmp, "AWS_REGION": "us-east-1",
	})
	ctx := context.Background()

	t.Run("scheduled allowance", func(t *testing.T) {
		var ev keeperfn.Event
		loadEvent(t, "scheduler-keeper.json", &ev)
		res := invokeKeeper(t, emu, ev)
		if res.Job != keeperfn.JobAllowance || res.Day != "2026-11-29" || res.Execute || len(res.Plan) == 0 {
			t.Fatalf("result %+v", res)
		}
	})
	reportInit(t, "keeper", emu)

	t.Run("payouts dry run", func(t *testing.T) {
		owed := json.RawMessage(fmt.Sprintf(`[{"owner":%q,"amount":1500000}]`, worker))
		res := invokeKeeper(t, emu, keeperfn.Event{Job: keeperfn.JobPayouts, Owed: owed, PayoutID: "w-2026-11-29"})
		if res.Execute || !strings.Contains(string(res.Plan), worker.String()) {
			t.Fatalf("result %+v", res)
		}
		if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 0 {
			t.Fatalf("dry run paid %d", got)
		}
	})

	t.Run("scheduled payouts of the store's earnings", func(t *testing.T) {
		// The function's ledger here is a fresh embedded store: nobody
		// earned anything, so the plan pays no one.
		res := invokeKeeper(t, emu, keeperfn.Event{Job: keeperfn.JobPayouts, ScheduledTime: "2026-11-29T16:00:00Z"})
		var plan struct {
			Transfers []json.RawMessage `json:"transfers"`
		}
		if err := json.Unmarshal(res.Plan, &plan); err != nil || res.Execute || len(plan.Transfers) != 0 {
			t.Fatalf("result %+v (%v), want a dry run paying no one", res, err)
		}
	})

	t.Run("bad event", func(t *testing.T) {
		_, err := emu.Invoke(ctx, []byte(`{"job":"drain-treasury"}`))
		var fe *FunctionError
		if !errors.As(err, &fe) || !strings.Contains(fe.Message, "bad event") {
			t.Fatalf("err %v, want a function error about the event", err)
		}
	})
	if strings.Contains(emu.Logs(), kp.String()) {
		t.Fatal("the keeper's key appeared in the logs")
	}
}

func invokeKeeper(t *testing.T, e *Emulator, ev keeperfn.Event) keeperfn.Result {
	t.Helper()
	r, err := e.Invoke(context.Background(), ev)
	if err != nil {
		t.Fatalf("invoke %s: %v\n%s", ev.Job, err, tail(e.Logs(), 4000))
	}
	var res keeperfn.Result
	if err := json.Unmarshal(r.Body, &res); err != nil {
		t.Fatalf("response %q: %v", r.Body, err)
	}
	return res
}
