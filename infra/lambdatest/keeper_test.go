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

	t.Run("asking to execute where execution is off", func(t *testing.T) {
		res := invokeKeeper(t, emu, keeperfn.Event{Job: keeperfn.JobRewards, ScheduledTime: "2026-11-29T15:00:00Z", Execute: true})
		if res.Execute || res.Outcome != keeperfn.OutcomeSuccess {
			t.Fatalf("result %+v, want a dry run", res)
		}
	})

	t.Run("an event choosing recipients", func(t *testing.T) {
		owed := fmt.Sprintf(`{"job":"payouts","owed":[{"owner":%q,"amount":1500000}],"payout_id":"w"}`, worker)
		_, err := emu.Invoke(ctx, []byte(owed))
		var fe *FunctionError
		if !errors.As(err, &fe) || !strings.Contains(fe.Message, "unknown field") {
			t.Fatalf("err %v, want the event refused", err)
		}
		if got := e.TokenBalance(t, e.Config.USDCATA(worker)); got != 0 {
			t.Fatalf("paid %d", got)
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
	logs := emu.Logs()
	if strings.Contains(logs, kp.String()) {
		t.Fatal("the keeper's key appeared in the logs")
	}
	// Each run's plan is in the log, with its job and day, and its outcome
	// is counted in the embedded metric format.
	for _, want := range []string{`"msg":"keeper plan"`, `"job":"allowance"`, `"day":"2026-11-29"`, `"KeeperRuns":1`, `"Outcome":"success"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, tail(logs, 3000))
		}
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
