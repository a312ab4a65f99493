package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// spendKey stores an API key for the account with the spend controls of
// c (its hash, id and account are set here) and returns it as stored.
func (f *fixture) spendKey(accountID string, c store.Secret) store.Secret {
	f.t.Helper()
	n := f.next()
	c.Hash, c.ID, c.AccountID = fmt.Sprintf("spendkey-%s-%04d", accountID, n), fmt.Sprintf("sk%04d", n), accountID
	if c.CreatedAt.IsZero() {
		c.CreatedAt = at(n)
	}
	if err := f.s.PutAPIKey(f.ctx, c); err != nil {
		f.t.Fatalf("PutAPIKey: %v", err)
	}
	return f.getKey(c.Hash)
}

func (f *fixture) getKey(hash string) store.Secret {
	f.t.Helper()
	k, err := f.s.GetAPIKey(f.ctx, hash)
	if err != nil {
		f.t.Fatalf("GetAPIKey: %v", err)
	}
	return k
}

// spend admits a job on the key created at when, saying whose it is, as the
// API does: the store then has no reason to read the key first.
func (f *fixture) spend(key store.Secret, price int64, when time.Time) (string, error) {
	id := fmt.Sprintf("spend%04d", f.next())
	r := request(key.Hash, id, "m1", price, when)
	r.Job.AccountID = key.AccountID
	_, err := f.s.Admit(f.ctx, r)
	return id, err
}

// mustSpend admits a job that must be admitted and returns its id.
func (f *fixture) mustSpend(key store.Secret, price int64, when time.Time) string {
	f.t.Helper()
	id, err := f.spend(key, price, when)
	if err != nil {
		f.t.Fatalf("Admit of %d at %v: %v", price, when, err)
	}
	return id
}

// refund fails a job with a refund.
func (f *fixture) refund(jobID string) {
	f.t.Helper()
	if _, err := f.s.Fail(f.ctx, jobID, "worker_lost", true, at(9000)); err != nil {
		f.t.Fatalf("Fail %s: %v", jobID, err)
	}
}

// wantUsage checks a key's usage, period usage and period.
func (f *fixture) wantUsage(what, hash string, usage, periodUsage int64, period string) {
	f.t.Helper()
	k := f.getKey(hash)
	if k.Usage != usage || k.PeriodUsage != periodUsage || k.Period != period {
		f.t.Errorf("%s: usage %d, period usage %d in %q; want %d, %d in %q",
			what, k.Usage, k.PeriodUsage, k.Period, usage, periodUsage, period)
	}
}

// wantStored checks a secret as api's get returns it and as the one secret
// its list gives for the account.
func (f *fixture) wantStored(what string, api secretAPI, want store.Secret) {
	f.t.Helper()
	got, err := api.get(f.ctx, f.s, want.Hash)
	if err != nil {
		f.t.Fatalf("%s: get: %v", what, err)
	}
	sameKey(f.t, what+": get", got, want)
	all, err := api.list(f.ctx, f.s, want.AccountID)
	if err != nil || len(all) != 1 {
		f.t.Fatalf("%s: list: %v, %v; want one", what, all, err)
	}
	sameKey(f.t, what+": list", all[0], want)
}

var apiKeyAPI, workerTokenAPI = secretAPIs[0], secretAPIs[1]

func normKey(s store.Secret) store.Secret {
	s = normSecret(s)
	s.ExpiresAt = normTime(s.ExpiresAt)
	return s
}

func sameKey(t *testing.T, what string, got, want store.Secret) {
	t.Helper()
	if g, w := normKey(got), normKey(want); g != w {
		t.Errorf("%s:\n got  %+v\n want %+v", what, g, w)
	}
}

var keyTests = []test{
	{"NamesAndControlsRoundTrip", func(t *testing.T, f *fixture) {
		in := store.Secret{Hash: "kh1", ID: "k1", AccountID: "a1", CreatedAt: at(1), Name: "ci runner",
			Limit: 500, LimitReset: store.ResetWeekly, ExpiresAt: at(5000),
			Usage: 99, PeriodUsage: 7, Period: "2031-W11"} // usage is the store's to count
		if err := f.s.PutAPIKey(f.ctx, in); err != nil {
			t.Fatalf("PutAPIKey: %v", err)
		}
		want := in
		want.Usage, want.PeriodUsage, want.Period = 0, 0, ""
		f.wantStored("API key", apiKeyAPI, want)

		// A worker token keeps its name; spend controls are an API key's.
		tok := in
		tok.Hash, tok.ID, tok.Name = "th1", "t1", "rack 3"
		if err := f.s.PutWorkerToken(f.ctx, tok); err != nil {
			t.Fatalf("PutWorkerToken: %v", err)
		}
		f.wantStored("worker token", workerTokenAPI,
			store.Secret{Hash: "th1", ID: "t1", AccountID: "a1", CreatedAt: at(1), Name: "rack 3"})

		for _, bad := range []store.Secret{
			{Hash: "kh2", ID: "k2", AccountID: "a1", CreatedAt: at(2), Limit: -1},
			{Hash: "kh3", ID: "k3", AccountID: "a1", CreatedAt: at(3), Limit: 5, LimitReset: "hourly"},
		} {
			if err := f.s.PutAPIKey(f.ctx, bad); err == nil {
				t.Errorf("PutAPIKey with limit %d per %q: no error", bad.Limit, bad.LimitReset)
			}
			if _, err := f.s.GetAPIKey(f.ctx, bad.Hash); err == nil {
				t.Errorf("key with limit %d per %q stored", bad.Limit, bad.LimitReset)
			}
		}
	}},
	{"Limit", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Limit: 25})
		first := f.mustSpend(key, 10, at(1))
		if j := f.getJob(first); j.KeyHash != key.Hash {
			t.Errorf("job's key %q, want %q", j.KeyHash, key.Hash)
		}
		f.mustSpend(key, 10, at(2))
		f.wantUsage("two jobs", key.Hash, 20, 20, "")
		id, err := f.spend(key, 10, at(3))
		wantErr(t, "a third job over the limit", err, store.ErrKeyLimit)
		if _, err := f.s.GetJob(f.ctx, id); err == nil {
			t.Error("refused job stored")
		}
		if a := f.getAccount("a1"); a.Credits != 980 || a.TotalSpent != 20 {
			t.Errorf("credits %d, spent %d; want 980, 20 (the refused job costs nothing)", a.Credits, a.TotalSpent)
		}
		f.wantUsage("after the refusal", key.Hash, 20, 20, "")
		f.mustSpend(key, 5, at(4)) // what is left fits
		f.wantUsage("the rest spent", key.Hash, 25, 25, "")

		f.refund(first)
		f.wantUsage("after a refund", key.Hash, 15, 15, "")
		f.refund(first) // given once
		f.wantUsage("after the refund asked again", key.Hash, 15, 15, "")
		f.mustSpend(key, 10, at(5))
		_, err = f.spend(key, 1, at(6))
		wantErr(t, "over the limit again", err, store.ErrKeyLimit)
		f.wantUsage("spent again", key.Hash, 25, 25, "")
		// A job that does not fit even alone is refused too.
		big := f.spendKey("a1", store.Secret{Limit: 5})
		_, err = f.spend(big, 6, at(7))
		wantErr(t, "a price above the limit", err, store.ErrKeyLimit)
		// Failing without a refund gives nothing back.
		other := f.spendKey("a1", store.Secret{Limit: 10})
		j := f.mustSpend(other, 10, at(8))
		if _, err := f.s.Fail(f.ctx, j, "client_gone", false, at(9)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		f.wantUsage("failed without a refund", other.Hash, 10, 10, "")
	}},
	{"NoLimitCounts", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{LimitReset: store.ResetDaily})
		for i := range 3 {
			f.mustSpend(key, 100, at(i))
		}
		f.wantUsage("uncapped", key.Hash, 300, 300, "2031-03-14")
		// The key of AccountFromKey's request (no account given).
		j := f.admit(key.Hash, "j-no-account", "m1", 1, at(10))
		if j.KeyHash != key.Hash || f.getJob(j.ID).KeyHash != key.Hash {
			t.Errorf("job's key %q, want %q", j.KeyHash, key.Hash)
		}
		f.wantUsage("uncapped", key.Hash, 301, 301, "2031-03-14")
	}},
	{"Reset", func(t *testing.T, f *fixture) {
		f.account("a1", 10_000, 0)
		day := base.Truncate(24 * time.Hour) // base's UTC day, 2031-03-14 (a Friday)
		for _, tc := range []struct {
			reset    string
			last     time.Time // the last instant of base's period
			next     time.Time // the first of the next
			nextName string
		}{
			{store.ResetDaily, day.Add(24*time.Hour - time.Millisecond), day.Add(24 * time.Hour), "2031-03-15"},
			{store.ResetWeekly, day.Add(3*24*time.Hour - time.Millisecond), day.Add(3 * 24 * time.Hour), "2031-W12"},
			{store.ResetMonthly, time.Date(2031, 3, 31, 23, 59, 59, 999e6, time.UTC), time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC), "2031-04"},
		} {
			t.Run(tc.reset, func(t *testing.T) {
				f := f.with(t)
				key := f.spendKey("a1", store.Secret{Limit: 25, LimitReset: tc.reset})
				this := store.PeriodOf(tc.reset, base)
				early := f.mustSpend(key, 10, base)
				f.mustSpend(key, 10, base)
				_, err := f.spend(key, 10, tc.last)
				wantErr(t, "the period's last instant", err, store.ErrKeyLimit)
				f.wantUsage("full", key.Hash, 20, 20, this)

				late := f.mustSpend(key, 10, tc.next)
				if got := store.PeriodOf(tc.reset, tc.next); got != tc.nextName {
					t.Fatalf("PeriodOf(%s, %v) = %q, want %q", tc.reset, tc.next, got, tc.nextName)
				}
				f.wantUsage("the next period", key.Hash, 30, 10, tc.nextName)
				f.mustSpend(key, 10, tc.next)
				_, err = f.spend(key, 10, tc.next)
				wantErr(t, "the next period full", err, store.ErrKeyLimit)

				// A refund of the last period's job leaves this
				// period's usage; one of this period's job takes from
				// it.
				f.refund(early)
				f.wantUsage("the last period's refund", key.Hash, 30, 20, tc.nextName)
				f.refund(late)
				f.wantUsage("this period's refund", key.Hash, 20, 10, tc.nextName)
				f.mustSpend(key, 10, tc.next)
			})
		}
	}},
	{"RefundNeverBelowZero", func(t *testing.T, f *fixture) {
		// A job spent under a daily period, the key switched to weekly
		// and back, a smaller job the same day: the period is the first
		// job's again, but its usage holds only the second's.
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Limit: 100, LimitReset: store.ResetDaily})
		first := f.mustSpend(key, 10, at(1))
		for i, reset := range []string{store.ResetWeekly, store.ResetDaily} {
			if _, err := f.s.UpdateAPIKey(f.ctx, "a1", key.ID, store.KeyPatch{LimitReset: new(reset)}); err != nil {
				t.Fatalf("UpdateAPIKey: %v", err)
			}
			f.mustSpend(key, int64(3+i), at(2+i))
		}
		f.wantUsage("before the refund", key.Hash, 17, 4, "2031-03-14")
		f.refund(first)
		f.wantUsage("after the refund", key.Hash, 7, 0, "2031-03-14")
	}},
	{"Expiry", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{ExpiresAt: at(100)})
		f.mustSpend(key, 1, at(99))
		for _, when := range []time.Time{at(100), at(101), at(100).Add(24 * time.Hour)} {
			_, err := f.spend(key, 1, when)
			wantErr(t, fmt.Sprintf("Admit at %v", when), err, store.ErrExpired)
		}
		if a := f.getAccount("a1"); a.TotalSpent != 1 {
			t.Errorf("spent %d, want 1 (expired requests cost nothing)", a.TotalSpent)
		}
		f.wantUsage("expired", key.Hash, 1, 1, "")
	}},
	{"Precedence", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		f.account("poor", 5, 0)
		for _, tc := range []struct {
			name    string
			key     store.Secret
			account string
			revoke  bool
			full    bool // the key's rate window is full
			want    error
		}{
			{"RevokedBeforeExpired", store.Secret{ExpiresAt: at(1)}, "a1", true, false, store.ErrRevoked},
			{"ExpiredBeforeKeyLimit", store.Secret{ExpiresAt: at(1), Limit: 5}, "a1", false, false, store.ErrExpired},
			{"KeyLimitBeforeRateLimit", store.Secret{Limit: 5}, "a1", false, true, store.ErrKeyLimit},
			{"KeyLimitBeforeCredits", store.Secret{Limit: 5}, "poor", false, false, store.ErrKeyLimit},
			{"RateLimitWithin", store.Secret{Limit: 50}, "a1", false, true, store.ErrRateLimited},
			{"CreditsWithin", store.Secret{Limit: 50}, "poor", false, false, store.ErrInsufficientCredits},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := f.with(t)
				key := f.spendKey(tc.account, tc.key)
				try := func(price int64) error {
					r := request(key.Hash, fmt.Sprintf("j%04d", f.next()), "m1", price, at(2))
					r.Job.AccountID, r.Limit = tc.account, 1
					_, err := f.s.Admit(f.ctx, r)
					return err
				}
				if tc.full {
					wantErr(t, "a free request that fills the window", try(0), nil)
				}
				if tc.revoke {
					if err := f.s.RevokeAPIKey(f.ctx, tc.account, key.ID, at(1)); err != nil {
						t.Fatalf("RevokeAPIKey: %v", err)
					}
				}
				wantErr(t, "Admit", try(10), tc.want)
			})
		}
	}},
	{"ConcurrentLimit", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Limit: 50, LimitReset: store.ResetDaily})
		errs := race(20, func(i int) error { _, err := f.spend(key, 10, at(i)); return err })
		ok, by := tally(t, errs, store.ErrKeyLimit)
		if ok != 5 || by[store.ErrKeyLimit] != 15 {
			t.Errorf("%d admitted, %d ErrKeyLimit; want 5, 15", ok, by[store.ErrKeyLimit])
		}
		f.wantUsage("after the race", key.Hash, 50, 50, "2031-03-14")
		if a := f.getAccount("a1"); a.TotalSpent != 50 {
			t.Errorf("spent %d, want 50", a.TotalSpent)
		}
	}},
	{"ConcurrentNewPeriod", func(t *testing.T, f *fixture) {
		// The key spent yesterday; today's first jobs race to start
		// today's period, and the rest to fill it.
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Limit: 30, LimitReset: store.ResetDaily})
		f.mustSpend(key, 20, base)
		next := base.Add(24 * time.Hour)
		errs := race(20, func(i int) error { _, err := f.spend(key, 10, next); return err })
		ok, by := tally(t, errs, store.ErrKeyLimit)
		if ok != 3 || by[store.ErrKeyLimit] != 17 {
			t.Errorf("%d admitted, %d ErrKeyLimit; want 3, 17", ok, by[store.ErrKeyLimit])
		}
		f.wantUsage("after the race", key.Hash, 50, 30, "2031-03-15")
	}},
	{"UpdateAPIKey", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Name: "old", Limit: 30})
		f.mustSpend(key, 20, at(1))
		want := f.getKey(key.Hash)
		for _, tc := range []struct {
			name  string
			patch store.KeyPatch
			apply func(*store.Secret)
		}{
			{"Nothing", store.KeyPatch{}, func(*store.Secret) {}},
			{"Name", store.KeyPatch{Name: new("new")}, func(s *store.Secret) { s.Name = "new" }},
			{"NoName", store.KeyPatch{Name: new("")}, func(s *store.Secret) { s.Name = "" }},
			{"Limit", store.KeyPatch{Limit: new(int64(100))}, func(s *store.Secret) { s.Limit = 100 }},
			{"Reset", store.KeyPatch{LimitReset: new(store.ResetMonthly)}, func(s *store.Secret) { s.LimitReset = store.ResetMonthly }},
			{"Expiry", store.KeyPatch{ExpiresAt: new(at(5000))}, func(s *store.Secret) { s.ExpiresAt = at(5000) }},
			{"All", store.KeyPatch{Name: new("all"), Limit: new(int64(0)), LimitReset: new(""), ExpiresAt: new(time.Time{})},
				func(s *store.Secret) { s.Name, s.Limit, s.LimitReset, s.ExpiresAt = "all", 0, "", time.Time{} }},
		} {
			got, err := f.s.UpdateAPIKey(f.ctx, "a1", key.ID, tc.patch)
			if err != nil {
				t.Fatalf("%s: UpdateAPIKey: %v", tc.name, err)
			}
			tc.apply(&want) // usage and period stay as they are
			sameKey(t, tc.name+": UpdateAPIKey", got, want)
			f.wantStored(tc.name, apiKeyAPI, want)
		}
		for _, bad := range []store.KeyPatch{{Limit: new(int64(-1))}, {LimitReset: new("yearly")}} {
			if _, err := f.s.UpdateAPIKey(f.ctx, "a1", key.ID, bad); err == nil {
				t.Errorf("UpdateAPIKey %+v: no error", bad)
			}
		}
		sameKey(t, "after refused patches", f.getKey(key.Hash), want)

		f.account("a2", 0, 0)
		_, err := f.s.UpdateAPIKey(f.ctx, "a2", key.ID, store.KeyPatch{Name: new("theirs")})
		wantErr(t, "UpdateAPIKey of another account's key", err, store.ErrNotFound)
		_, err = f.s.UpdateAPIKey(f.ctx, "a1", "nope", store.KeyPatch{Name: new("x")})
		wantErr(t, "UpdateAPIKey of an unknown id", err, store.ErrNotFound)
		sameKey(t, "after patches of others", f.getKey(key.Hash), want)

		// A revoked key's name and controls may still change.
		if err := f.s.RevokeAPIKey(f.ctx, "a1", key.ID, at(10)); err != nil {
			t.Fatalf("RevokeAPIKey: %v", err)
		}
		got, err := f.s.UpdateAPIKey(f.ctx, "a1", key.ID, store.KeyPatch{Name: new("retired")})
		if err != nil || got.Name != "retired" || got.Active() {
			t.Errorf("UpdateAPIKey of a revoked key: %+v, %v", got, err)
		}
	}},
	{"UpdateAppliesToAdmit", func(t *testing.T, f *fixture) {
		f.account("a1", 1000, 0)
		key := f.spendKey("a1", store.Secret{Limit: 30})
		patch := func(p store.KeyPatch) {
			t.Helper()
			if _, err := f.s.UpdateAPIKey(f.ctx, "a1", key.ID, p); err != nil {
				t.Fatalf("UpdateAPIKey: %v", err)
			}
		}
		f.mustSpend(key, 20, at(1))
		patch(store.KeyPatch{Limit: new(int64(25))})
		_, err := f.spend(key, 10, at(2))
		wantErr(t, "a lowered limit", err, store.ErrKeyLimit)
		patch(store.KeyPatch{Limit: new(int64(0))})
		f.mustSpend(key, 10, at(3))
		patch(store.KeyPatch{Limit: new(int64(30))})
		_, err = f.spend(key, 1, at(4))
		wantErr(t, "a limit below the usage", err, store.ErrKeyLimit)
		// A reset that starts periods: nothing spent in today's yet.
		patch(store.KeyPatch{LimitReset: new(store.ResetDaily)})
		f.mustSpend(key, 30, at(5))
		f.wantUsage("in the new period", key.Hash, 60, 30, "2031-03-14")
		patch(store.KeyPatch{ExpiresAt: new(at(6))})
		_, err = f.spend(key, 0, at(6))
		wantErr(t, "an expiry set", err, store.ErrExpired)
		patch(store.KeyPatch{ExpiresAt: new(time.Time{}), Limit: new(int64(0))})
		f.mustSpend(key, 1, at(7))
	}},
	{"RenameWorkerToken", func(t *testing.T, f *fixture) {
		tok := secret("a1", 1, at(1))
		if err := f.s.PutWorkerToken(f.ctx, tok); err != nil {
			t.Fatalf("PutWorkerToken: %v", err)
		}
		for _, name := range []string{"rack 1", ""} {
			got, err := f.s.RenameWorkerToken(f.ctx, "a1", tok.ID, name)
			want := tok
			want.Name = name
			if err != nil {
				t.Fatalf("RenameWorkerToken: %v", err)
			}
			sameKey(t, "RenameWorkerToken", got, want)
			f.wantStored("renamed "+name, workerTokenAPI, want)
		}
		_, err := f.s.RenameWorkerToken(f.ctx, "a2", tok.ID, "theirs")
		wantErr(t, "RenameWorkerToken of another account's token", err, store.ErrNotFound)
		_, err = f.s.RenameWorkerToken(f.ctx, "a1", "nope", "x")
		wantErr(t, "RenameWorkerToken of an unknown id", err, store.ErrNotFound)
		// The namespaces stay apart: a token is not an API key.
		_, err = f.s.UpdateAPIKey(f.ctx, "a1", tok.ID, store.KeyPatch{Name: new("x")})
		wantErr(t, "UpdateAPIKey of a worker token's id", err, store.ErrNotFound)
		if got, _ := f.s.GetWorkerToken(f.ctx, tok.Hash); got.Name != "" {
			t.Errorf("token renamed by failed calls: %q", got.Name)
		}
		if toks, _ := f.s.ListWorkerTokens(f.ctx, "a1"); !slices.Equal(secretIDs(toks), []string{tok.ID}) {
			t.Errorf("tokens %v", secretIDs(toks))
		}
	}},
}
