package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/api"
	"github.com/c0mpute/c0mpute/functions/credential"
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

// closed records the connections the command closes (the relay's
// management API stands behind this interface in AWS).
type closed struct{ conns []string }

func (c *closed) Delete(_ context.Context, conn string) error {
	c.conns = append(c.conns, conn)
	return nil
}

// The operator bootstraps an account: creates it, grants credits once per
// reason (a ledger entry), issues a key, and revokes keys and tokens (a
// token's live workers closed).
func TestBootstrap(t *testing.T) {
	st, err := embedded.Open(filepath.Join(t.TempDir(), "c0mpute.db"), embedded.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	closer := &closed{}
	ctx := withCloser(context.Background(), closer)
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := command(ctx, st, args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return out.String()
	}
	run("account", "carol", "-wallet", "7Yb2tWXMdGBLqLmUdL4MjtTNEQ6B8hXyR9YY2G4mFQXW")
	if err := command(ctx, st, []string{"account", "carol"}, io.Discard); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("creating carol twice: %v", err)
	}
	if out := run("grant", "carol", "500", "launch-credit"); !strings.Contains(out, "balance 500 credits") {
		t.Errorf("grant: %s", out)
	}
	if out := run("grant", "carol", "500", "launch-credit"); !strings.Contains(out, "made already") || !strings.Contains(out, "balance 500") {
		t.Errorf("the same grant again: %s", out)
	}
	if err := command(ctx, st, []string{"grant", "nobody", "5", "x"}, io.Discard); err == nil || !strings.Contains(err.Error(), "no account nobody") {
		t.Errorf("a grant to no account: %v", err)
	}
	if err := command(ctx, st, []string{"grant", "carol", "-5", "x"}, io.Discard); err == nil {
		t.Error("a negative grant was accepted")
	}
	out := run("key", "carol", "-name", "first")
	id, secret, _ := strings.Cut(strings.TrimSpace(out), "\t")
	secret = strings.TrimSuffix(secret, " (shown once)")
	if k, err := st.GetAPIKey(ctx, credential.Hash(secret)); err != nil || k.ID != id || k.AccountID != "carol" || k.Name != "first" {
		t.Fatalf("the issued key: %+v, %v (output %q)", k, err, out)
	}
	if out := run("keys", "carol"); !strings.Contains(out, id) || !strings.Contains(out, "first") || !strings.Contains(out, "active") {
		t.Errorf("keys:\n%s", out)
	}
	run("revoke-key", "carol", id)
	if out := run("keys", "carol"); !strings.Contains(out, "revoked") {
		t.Errorf("keys after revoke:\n%s", out)
	}
	now := time.Now()
	if err := st.PutWorkerToken(ctx, store.Secret{Hash: "tok-hash", ID: "tok_1", AccountID: "carol", Name: "rig", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, store.Worker{Conn: "live-1", AccountID: "carol", TokenHash: "tok-hash", Pubkey: "k1", State: store.WorkerIdle, ConnectedAt: now}); err != nil {
		t.Fatal(err)
	}
	if out := run("tokens", "carol"); !strings.Contains(out, "tok_1") || !strings.Contains(out, "rig") {
		t.Errorf("tokens:\n%s", out)
	}
	if out := run("revoke-token", "carol", "tok_1"); !strings.Contains(out, "closed 1") || len(closer.conns) != 1 || closer.conns[0] != "live-1" {
		t.Errorf("revoke-token: %q, closed %v", out, closer.conns)
	}
	if out := run("ledger", "carol"); !strings.Contains(out, "grant") || !strings.Contains(out, "+500") || !strings.Contains(out, "operator:launch-credit") {
		t.Errorf("ledger:\n%s", out)
	}
}
