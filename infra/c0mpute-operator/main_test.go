package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/store"
	"github.com/c0mpute/c0mpute/functions/store/embedded"
)

// The operator sees every account's identities, with their standing and
// counts, and marks one as a trusted reference.
func TestWorkersAndTrust(t *testing.T) {
	ctx := context.Background()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0mpute.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().Truncate(time.Second)
	for _, a := range []string{"alice", "bob"} {
		if err := st.CreateAccount(ctx, store.Account{ID: a, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutWorkerToken(ctx, store.Secret{Hash: "hash-" + a, ID: "tok-" + a, AccountID: a, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := st.PutWorker(ctx, store.Worker{Conn: "conn-" + a, AccountID: a, TokenHash: "hash-" + a, Pubkey: "key-" + a,
			State: store.WorkerIdle, ConnectedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.RegisterWorker(ctx, "conn-alice", []string{"m"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteWorker(ctx, "conn-bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Judge(ctx, store.Verdict{JobID: "j1", Pubkey: "key-bob", AccountID: "bob", TokenHash: "hash-bob",
		Kind: store.VerdictCanaryFailed, Strikes: store.CanaryStrikes, Reason: "canary_mismatch", At: now}); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := command(ctx, st, []string{"trust", "alice", "key-alice"}, &out); err != nil {
		t.Fatal(err)
	}
	if err := command(ctx, st, []string{"trust", "alice", "key-nobody"}, &out); err == nil || !strings.Contains(err.Error(), "no worker identity") {
		t.Errorf("trusting an unknown identity: %v", err)
	}
	out.Reset()
	if err := command(ctx, st, []string{"workers", "-json"}, &out); err != nil {
		t.Fatal(err)
	}
	var views []api.WorkerView
	if err := json.Unmarshal(out.Bytes(), &views); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	want := map[string]api.WorkerView{
		"key-alice": {AccountID: "alice", TokenID: "tok-alice", State: "active", Trusted: true, Models: []string{"m"}},
		"key-bob":   {AccountID: "bob", TokenID: "tok-bob", State: "quarantined", Strikes: 3, CanariesFailed: 1, LastReason: "canary_mismatch", Models: []string{}},
	}
	if len(views) != len(want) {
		t.Fatalf("%d workers listed, want %d: %+v", len(views), len(want), views)
	}
	for _, v := range views {
		w := want[v.ID]
		if v.AccountID != w.AccountID || v.TokenID != w.TokenID || v.State != w.State || v.Trusted != w.Trusted ||
			v.Strikes != w.Strikes || v.CanariesFailed != w.CanariesFailed || v.LastReason != w.LastReason ||
			strings.Join(v.Models, ",") != strings.Join(w.Models, ",") {
			t.Errorf("worker %s: %+v, want %+v", v.ID, v, w)
		}
	}
	out.Reset()
	if err := command(ctx, st, []string{"workers", "-account", "bob"}, &out); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "key-bob") || strings.Contains(s, "key-alice") || !strings.Contains(s, "quarantined") {
		t.Errorf("bob's table:\n%s", s)
	}
}
