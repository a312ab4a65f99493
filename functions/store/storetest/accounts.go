package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// with returns the fixture for a nested subtest: same store, that test's t.
func (f *fixture) with(t *testing.T) *fixture {
	return &fixture{t: t, s: f.s, ctx: f.ctx, seq: f.next() * 1000}
}

var accountTests = []test{
	{"CreateGet", func(t *testing.T, f *fixture) {
		want := store.Account{ID: "a1", Wallet: "w1", Credits: 10, TotalDeposited: 10, FreeAllowanceLeft: 3, CreatedAt: at(1)}
		if err := f.s.CreateAccount(f.ctx, want); err != nil {
			t.Fatalf("CreateAccount: %v", err)
		}
		sameAccount(t, "GetAccount", f.getAccount("a1"), want)

		dup := want
		dup.Credits = 999
		wantErr(t, "CreateAccount again", f.s.CreateAccount(f.ctx, dup), store.ErrExists)
		sameAccount(t, "after duplicate create", f.getAccount("a1"), want)

		_, err := f.s.GetAccount(f.ctx, "nobody")
		wantErr(t, "GetAccount missing", err, store.ErrNotFound)
	}},
	{"PayoutWallets", func(t *testing.T, f *fixture) {
		// "w1" signed in (its id is its wallet); "a2" proved w1 too; "a3"
		// has no wallet yet.
		f.account("w1", 0, 0) // its Wallet is "wallet-w1": set it to itself
		if _, err := f.s.SetWallet(f.ctx, "w1", "w1"); err != nil {
			t.Fatalf("SetWallet w1: %v", err)
		}
		f.account("a2", 0, 0)
		a, err := f.s.SetWallet(f.ctx, "a2", "w1")
		if err != nil || a.Wallet != "w1" || a.ID != "a2" {
			t.Fatalf("SetWallet a2 = %+v, %v", a, err)
		}
		if err := f.s.CreateAccount(f.ctx, store.Account{ID: "a3", CreatedAt: at(1)}); err != nil {
			t.Fatal(err)
		}
		paidTo := func(wallet string, want ...string) {
			t.Helper()
			as, err := f.s.AccountsPaidTo(f.ctx, wallet)
			var ids []string
			for _, a := range as {
				ids = append(ids, a.ID)
			}
			if err != nil || !slices.Equal(ids, want) {
				t.Errorf("AccountsPaidTo %s = %v, %v; want %v", wallet, ids, err, want)
			}
		}
		paidTo("w1", "a2", "w1")
		// a2 moves to w2: w1 no longer lists it; a3 takes its first.
		if _, err := f.s.SetWallet(f.ctx, "a2", "w2"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.SetWallet(f.ctx, "a3", "w2"); err != nil {
			t.Fatal(err)
		}
		paidTo("w1", "w1")
		paidTo("w2", "a2", "a3")
		paidTo("wallet-w1") // w1's old wallet, set at creation, never proven
		// w1 pays elsewhere: the account named after the wallet is not
		// paid to it any more.
		if _, err := f.s.SetWallet(f.ctx, "w1", "w2"); err != nil {
			t.Fatal(err)
		}
		paidTo("w1")
		paidTo("w2", "a2", "a3", "w1")
		if got := f.getAccount("a2"); got.Wallet != "w2" {
			t.Errorf("a2's wallet %q, want w2", got.Wallet)
		}
		_, err = f.s.SetWallet(f.ctx, "nobody", "w1")
		wantErr(t, "SetWallet of no account", err, store.ErrNotFound)

		until := at(5).Add(24 * time.Hour)
		if err := f.s.SetStakeBoost(f.ctx, "a2", until); err != nil {
			t.Fatal(err)
		}
		if got := f.getAccount("a2"); !got.StakeBoostUntil.Equal(until) || !got.Boosted(at(5)) || got.Boosted(until) {
			t.Errorf("a2 boosted until %v, want %v", got.StakeBoostUntil, until)
		}
		if got := f.getAccount("a3"); !got.StakeBoostUntil.IsZero() || got.Boosted(at(5)) {
			t.Errorf("a3 boosted until %v", got.StakeBoostUntil)
		}
		wantErr(t, "SetStakeBoost of no account", f.s.SetStakeBoost(f.ctx, "nobody", until), store.ErrNotFound)
	}},
	{"GrantOnce", func(t *testing.T, f *fixture) {
		for _, deposit := range []bool{true, false} {
			t.Run(fmt.Sprintf("deposit=%v", deposit), func(t *testing.T) {
				f := f.with(t)
				id := fmt.Sprintf("acct-%v", deposit)
				f.account(id, 5, 0)
				applied, err := f.s.Grant(f.ctx, id, 100, "grant-"+id, deposit)
				if err != nil || !applied {
					t.Fatalf("Grant: applied %v, err %v; want applied", applied, err)
				}
				want := f.getAccount(id)
				if want.Credits != 105 {
					t.Errorf("credits %d, want 105", want.Credits)
				}
				wantDeposited := int64(0)
				if deposit {
					wantDeposited = 100
				}
				if want.TotalDeposited != wantDeposited {
					t.Errorf("total deposited %d, want %d", want.TotalDeposited, wantDeposited)
				}
				applied, err = f.s.Grant(f.ctx, id, 100, "grant-"+id, deposit)
				if err != nil || applied {
					t.Fatalf("Grant again: applied %v, err %v; want not applied", applied, err)
				}
				sameAccount(t, "after repeated grant", f.getAccount(id), want)
			})
		}
	}},
	{"GrantKeyIsGlobal", func(t *testing.T, f *fixture) {
		f.account("a1", 0, 0)
		f.account("a2", 0, 0)
		if applied, err := f.s.Grant(f.ctx, "a1", 10, "sig-1", true); err != nil || !applied {
			t.Fatalf("Grant: applied %v, err %v", applied, err)
		}
		// A deposit signature credits once, whoever claims it next.
		if applied, err := f.s.Grant(f.ctx, "a2", 10, "sig-1", true); err != nil || applied {
			t.Fatalf("Grant same key to another account: applied %v, err %v; want not applied", applied, err)
		}
		if got := f.getAccount("a2").Credits; got != 0 {
			t.Errorf("a2 credits %d, want 0", got)
		}
	}},
	{"GrantMissingAccount", func(t *testing.T, f *fixture) {
		_, err := f.s.Grant(f.ctx, "later", 10, "sig-later", true)
		wantErr(t, "Grant to missing account", err, store.ErrNotFound)
		// The failed grant did not use up its key.
		f.account("later", 0, 0)
		if applied, err := f.s.Grant(f.ctx, "later", 10, "sig-later", true); err != nil || !applied {
			t.Fatalf("Grant after account exists: applied %v, err %v; want applied", applied, err)
		}
		if got := f.getAccount("later").Credits; got != 10 {
			t.Errorf("credits %d, want 10", got)
		}
	}},
	{"GrantConcurrentSameKey", func(t *testing.T, f *fixture) {
		f.account("a1", 0, 0)
		var applied [50]bool
		errs := race(50, func(i int) error {
			var err error
			applied[i], err = f.s.Grant(f.ctx, "a1", 7, "same-key", true)
			return err
		})
		tally(t, errs)
		if n := countTrue(applied[:]); n != 1 {
			t.Errorf("%d grants applied, want 1", n)
		}
		a := f.getAccount("a1")
		if a.Credits != 7 || a.TotalDeposited != 7 {
			t.Errorf("credits %d, deposited %d; want 7, 7", a.Credits, a.TotalDeposited)
		}
	}},
	{"GrantConcurrentDistinctKeys", func(t *testing.T, f *fixture) {
		f.account("a1", 0, 0)
		errs := race(50, func(i int) error {
			applied, err := f.s.Grant(f.ctx, "a1", 3, fmt.Sprintf("key-%d", i), false)
			if err == nil && !applied {
				return fmt.Errorf("grant %d not applied", i)
			}
			return err
		})
		tally(t, errs)
		if got := f.getAccount("a1").Credits; got != 150 {
			t.Errorf("credits %d, want 150 (a lost update?)", got)
		}
	}},
}

func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// secretAPI is one namespace of secrets, so one table of tests covers API
// keys and worker tokens alike.
type secretAPI struct {
	name   string
	put    func(context.Context, store.Store, store.Secret) error
	get    func(context.Context, store.Store, string) (store.Secret, error)
	list   func(context.Context, store.Store, string) ([]store.Secret, error)
	revoke func(context.Context, store.Store, string, string, time.Time) error
}

var secretAPIs = []secretAPI{
	{
		name: "APIKey",
		put:  func(ctx context.Context, s store.Store, sec store.Secret) error { return s.PutAPIKey(ctx, sec) },
		get:  func(ctx context.Context, s store.Store, h string) (store.Secret, error) { return s.GetAPIKey(ctx, h) },
		list: func(ctx context.Context, s store.Store, a string) ([]store.Secret, error) {
			return s.ListAPIKeys(ctx, a)
		},
		revoke: func(ctx context.Context, s store.Store, a, id string, at time.Time) error {
			return s.RevokeAPIKey(ctx, a, id, at)
		},
	},
	{
		name: "WorkerToken",
		put:  func(ctx context.Context, s store.Store, sec store.Secret) error { return s.PutWorkerToken(ctx, sec) },
		get: func(ctx context.Context, s store.Store, h string) (store.Secret, error) {
			return s.GetWorkerToken(ctx, h)
		},
		list: func(ctx context.Context, s store.Store, a string) ([]store.Secret, error) {
			return s.ListWorkerTokens(ctx, a)
		},
		revoke: func(ctx context.Context, s store.Store, a, id string, at time.Time) error {
			_, err := s.RevokeWorkerToken(ctx, a, id, at)
			return err
		},
	},
}

func secret(account string, n int, created time.Time) store.Secret {
	return store.Secret{
		Hash:      fmt.Sprintf("hash-%s-%02d", account, n),
		ID:        fmt.Sprintf("id%s%02d", account, n),
		AccountID: account,
		CreatedAt: created,
	}
}

func secretIDs(secs []store.Secret) []string {
	out := []string{}
	for _, s := range secs {
		out = append(out, s.ID)
	}
	return out
}

func secretTests() []test {
	var tests []test
	for _, api := range secretAPIs {
		tests = append(tests,
			test{api.name + "/PutGet", func(t *testing.T, f *fixture) {
				want := secret("a1", 1, at(5))
				if err := api.put(f.ctx, f.s, want); err != nil {
					t.Fatalf("put: %v", err)
				}
				got, err := api.get(f.ctx, f.s, want.Hash)
				if err != nil {
					t.Fatalf("get: %v", err)
				}
				if normSecret(got) != normSecret(want) {
					t.Errorf("get: %+v, want %+v", got, want)
				}
				if !got.Active() {
					t.Error("new secret not active")
				}
				dup := want
				dup.AccountID = "a2"
				wantErr(t, "put same hash", api.put(f.ctx, f.s, dup), store.ErrExists)
				_, err = api.get(f.ctx, f.s, "no-such-hash")
				wantErr(t, "get missing", err, store.ErrNotFound)
			}},
			test{api.name + "/ListOldestFirst", func(t *testing.T, f *fixture) {
				for _, s := range []store.Secret{
					secret("a1", 1, at(300)), secret("a1", 2, at(100)), secret("a1", 3, at(200)),
					secret("a2", 4, at(50)),
				} {
					if err := api.put(f.ctx, f.s, s); err != nil {
						t.Fatalf("put: %v", err)
					}
				}
				for account, want := range map[string][]string{
					"a1": {"ida102", "ida103", "ida101"},
					"a2": {"ida204"},
					"a3": {},
				} {
					got, err := api.list(f.ctx, f.s, account)
					if err != nil {
						t.Fatalf("list %s: %v", account, err)
					}
					if ids := secretIDs(got); !slices.Equal(ids, want) {
						t.Errorf("list %s: %v, want %v", account, ids, want)
					}
				}
			}},
			test{api.name + "/Limit", func(t *testing.T, f *fixture) {
				for i := range store.MaxActiveKeys {
					if err := api.put(f.ctx, f.s, secret("a1", i, at(i))); err != nil {
						t.Fatalf("put %d: %v", i, err)
					}
				}
				wantErr(t, "put over the limit", api.put(f.ctx, f.s, secret("a1", 10, at(10))), store.ErrLimit)
				if err := api.put(f.ctx, f.s, secret("a2", 10, at(10))); err != nil {
					t.Fatalf("another account's put: %v", err)
				}
				if err := api.revoke(f.ctx, f.s, "a1", secret("a1", 0, base).ID, at(20)); err != nil {
					t.Fatalf("revoke: %v", err)
				}
				if err := api.put(f.ctx, f.s, secret("a1", 11, at(21))); err != nil {
					t.Fatalf("put after a revoke: %v", err)
				}
				wantErr(t, "put over the limit again", api.put(f.ctx, f.s, secret("a1", 12, at(22))), store.ErrLimit)
				got, err := api.list(f.ctx, f.s, "a1")
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				if len(got) != store.MaxActiveKeys+1 {
					t.Errorf("listed %d, want %d (revoked ones are listed too)", len(got), store.MaxActiveKeys+1)
				}
			}},
			test{api.name + "/Revoke", func(t *testing.T, f *fixture) {
				s1, s2 := secret("a1", 1, at(1)), secret("a1", 2, at(2))
				for _, s := range []store.Secret{s1, s2} {
					if err := api.put(f.ctx, f.s, s); err != nil {
						t.Fatalf("put: %v", err)
					}
				}
				wantErr(t, "revoke by another account", api.revoke(f.ctx, f.s, "a2", s1.ID, at(5)), store.ErrNotFound)
				wantErr(t, "revoke unknown id", api.revoke(f.ctx, f.s, "a1", "nope", at(5)), store.ErrNotFound)
				if got, _ := api.get(f.ctx, f.s, s1.Hash); !got.Active() {
					t.Fatal("secret revoked by a failed revoke")
				}
				if err := api.revoke(f.ctx, f.s, "a1", s1.ID, at(10)); err != nil {
					t.Fatalf("revoke: %v", err)
				}
				if err := api.revoke(f.ctx, f.s, "a1", s1.ID, at(20)); err != nil {
					t.Fatalf("revoke twice: %v", err)
				}
				got, err := api.get(f.ctx, f.s, s1.Hash)
				if err != nil {
					t.Fatalf("get revoked: %v", err)
				}
				if got.Active() || !got.RevokedAt.Equal(at(10)) {
					t.Errorf("revoked at %v, want %v (the first revoke)", got.RevokedAt, at(10))
				}
				if got, _ := api.get(f.ctx, f.s, s2.Hash); !got.Active() {
					t.Error("revoke touched another secret")
				}
			}},
			test{api.name + "/ConcurrentLimit", func(t *testing.T, f *fixture) {
				errs := race(20, func(i int) error { return api.put(f.ctx, f.s, secret("a1", i, at(i))) })
				ok, by := tally(t, errs, store.ErrLimit)
				if ok != store.MaxActiveKeys || by[store.ErrLimit] != 20-store.MaxActiveKeys {
					t.Errorf("%d put, %d ErrLimit; want %d, %d", ok, by[store.ErrLimit], store.MaxActiveKeys, 20-store.MaxActiveKeys)
				}
				if got, _ := api.list(f.ctx, f.s, "a1"); len(got) != store.MaxActiveKeys {
					t.Errorf("listed %d, want %d", len(got), store.MaxActiveKeys)
				}
			}},
		)
	}
	return append(tests,
		test{"SeparateNamespaces", func(t *testing.T, f *fixture) {
			key := secret("a1", 1, at(1))
			if err := f.s.PutAPIKey(f.ctx, key); err != nil {
				t.Fatalf("PutAPIKey: %v", err)
			}
			_, err := f.s.GetWorkerToken(f.ctx, key.Hash)
			wantErr(t, "GetWorkerToken of an API key", err, store.ErrNotFound)
			if toks, err := f.s.ListWorkerTokens(f.ctx, "a1"); err != nil || len(toks) != 0 {
				t.Errorf("ListWorkerTokens: %v, %v; want none", toks, err)
			}
			if err := f.s.PutWorkerToken(f.ctx, key); err != nil {
				t.Fatalf("PutWorkerToken with an API key's hash: %v", err)
			}
			if _, err := f.s.RevokeWorkerToken(f.ctx, "a1", key.ID, at(2)); err != nil {
				t.Fatalf("RevokeWorkerToken: %v", err)
			}
			if k, _ := f.s.GetAPIKey(f.ctx, key.Hash); !k.Active() {
				t.Error("revoking a worker token revoked the API key")
			}
		}},
		test{"RevokeWorkerTokenReturnsLiveConns", func(t *testing.T, f *fixture) {
			t1, t2 := secret("a1", 1, at(1)), secret("a1", 2, at(2))
			for _, s := range []store.Secret{t1, t2} {
				if err := f.s.PutWorkerToken(f.ctx, s); err != nil {
					t.Fatalf("PutWorkerToken: %v", err)
				}
			}
			for conn, tok := range map[string]string{"w1": t1.Hash, "w2": t1.Hash, "w3": t2.Hash} {
				w := store.Worker{Conn: conn, AccountID: "a1", TokenHash: tok, State: store.WorkerIdle, ConnectedAt: base}
				if err := f.s.PutWorker(f.ctx, w); err != nil {
					t.Fatalf("PutWorker: %v", err)
				}
			}
			if _, err := f.s.RegisterWorker(f.ctx, "w1", []string{"m"}, nil); err != nil {
				t.Fatalf("RegisterWorker: %v", err)
			}
			got, err := f.s.RevokeWorkerToken(f.ctx, "a1", t1.ID, at(10))
			if err != nil {
				t.Fatalf("RevokeWorkerToken: %v", err)
			}
			if slices.Sort(got); !slices.Equal(got, []string{"w1", "w2"}) {
				t.Errorf("conns %v, want [w1 w2] (registered or not)", got)
			}
			if tok, _ := f.s.GetWorkerToken(f.ctx, t1.Hash); tok.Active() {
				t.Error("token still active")
			}
			if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
				t.Fatalf("DeleteWorker: %v", err)
			}
			got, err = f.s.RevokeWorkerToken(f.ctx, "a1", t1.ID, at(20))
			if err != nil {
				t.Fatalf("RevokeWorkerToken again: %v", err)
			}
			if !slices.Equal(got, []string{"w2"}) {
				t.Errorf("conns on second revoke %v, want [w2]", got)
			}
			_, err = f.s.RevokeWorkerToken(f.ctx, "a2", t2.ID, at(20))
			wantErr(t, "RevokeWorkerToken of another account", err, store.ErrNotFound)

			// A connect that checked the token before the revoke and
			// stores its worker after it is refused: the revoke could
			// not have listed it.
			late := store.Worker{Conn: "w4", AccountID: "a1", TokenHash: t1.Hash, State: store.WorkerIdle, ConnectedAt: base}
			wantErr(t, "PutWorker on a revoked token", f.s.PutWorker(f.ctx, late), store.ErrRevoked)
			if _, err := f.s.GetWorker(f.ctx, "w4"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("worker on a revoked token stored: %v", err)
			}
		}},
	)
}

var nonceTests = []test{
	{"Replay", func(t *testing.T, f *fixture) {
		exp := time.Now().Add(time.Hour)
		if err := f.s.UseNonce(f.ctx, "n1", exp); err != nil {
			t.Fatalf("UseNonce: %v", err)
		}
		wantErr(t, "UseNonce replay", f.s.UseNonce(f.ctx, "n1", exp), store.ErrExists)
		if err := f.s.UseNonce(f.ctx, "n2", exp); err != nil {
			t.Fatalf("UseNonce other: %v", err)
		}
	}},
	{"AfterExpiry", func(t *testing.T, f *fixture) {
		// The store judges expiry by its own clock, so this test waits.
		// A second is ample for two calls even on a loaded machine.
		const life = time.Second
		exp := time.Now().Add(life)
		if err := f.s.UseNonce(f.ctx, "n1", exp); err != nil {
			t.Fatalf("UseNonce: %v", err)
		}
		wantErr(t, "UseNonce before expiry", f.s.UseNonce(f.ctx, "n1", exp), store.ErrExists)
		time.Sleep(time.Until(exp) + 100*time.Millisecond)
		if err := f.s.UseNonce(f.ctx, "n1", time.Now().Add(time.Hour)); err != nil {
			t.Fatalf("UseNonce after expiry: %v", err)
		}
		wantErr(t, "UseNonce replay of the renewed nonce", f.s.UseNonce(f.ctx, "n1", time.Now().Add(time.Hour)), store.ErrExists)
	}},
	{"Expired", func(t *testing.T, f *fixture) {
		past := time.Now().Add(-time.Minute)
		for i := range 3 {
			if err := f.s.UseNonce(f.ctx, "old", past); err != nil {
				t.Fatalf("UseNonce %d with an expiry in the past: %v", i, err)
			}
		}
	}},
	{"Concurrent", func(t *testing.T, f *fixture) {
		exp := time.Now().Add(time.Hour)
		errs := race(50, func(int) error { return f.s.UseNonce(f.ctx, "n1", exp) })
		if ok, by := tally(t, errs, store.ErrExists); ok != 1 || by[store.ErrExists] != 49 {
			t.Errorf("%d used, %d ErrExists; want 1, 49", ok, by[store.ErrExists])
		}
	}},
}
