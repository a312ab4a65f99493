package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

// connect connects (and registers, for m1) a worker of identity pubkey on
// account and token, and returns the store's error.
func (f *fixture) connect(conn, account, pubkey, token string, when time.Time) error {
	f.t.Helper()
	err := f.s.PutWorker(f.ctx, store.Worker{Conn: conn, AccountID: account, TokenHash: token, Pubkey: pubkey,
		State: store.WorkerIdle, ConnectedAt: when})
	if err == nil {
		_, err = f.s.RegisterWorker(f.ctx, conn, []string{"m1"}, nil)
	}
	return err
}

// mustConnect connects a worker that must connect.
func (f *fixture) mustConnect(conn, account, pubkey, token string, when time.Time) {
	f.t.Helper()
	if err := f.connect(conn, account, pubkey, token, when); err != nil {
		f.t.Fatalf("connect %s (%s on %s): %v", conn, pubkey, token, err)
	}
}

func (f *fixture) getReputation(account, pubkey string) store.Reputation {
	f.t.Helper()
	r, err := f.s.GetReputation(f.ctx, account, pubkey)
	if err != nil {
		f.t.Fatalf("GetReputation %s on %s: %v", pubkey, account, err)
	}
	return r
}

// judge applies a verdict that must apply, checks that the store followed
// the policy (Reputation.Judged, from the reputation before) and returns
// the reputation after.
func (f *fixture) judge(v store.Verdict) store.Reputation {
	f.t.Helper()
	want := f.getReputation(v.AccountID, v.Pubkey).Judged(v)
	got, err := f.s.Judge(f.ctx, v)
	if err != nil {
		f.t.Fatalf("Judge %s of %s: %v", v.JobID, v.Pubkey, err)
	}
	sameReputation(f.t, "Judge "+v.JobID, got, want)
	sameReputation(f.t, "GetReputation after Judge "+v.JobID, f.getReputation(v.AccountID, v.Pubkey), want)
	return got
}

// verdict is a verdict on job by identity pubkey of account "wa" on conn,
// connected with token.
func verdict(job, conn, pubkey, token string, kind store.VerdictKind, strikes int64) store.Verdict {
	return store.Verdict{JobID: job, Conn: conn, Pubkey: pubkey, AccountID: "wa", TokenHash: token,
		Kind: kind, Strikes: strikes, Reason: "reason-" + job, At: at(1000)}
}

// wantStanding fails unless the live worker conn stands so, with strikes.
func (f *fixture) wantStanding(conn string, standing store.Standing, strikes int64) {
	f.t.Helper()
	if w := f.getWorker(conn); w.Standing != standing || w.Strikes != strikes {
		f.t.Errorf("worker %s: %s with %d strikes, want %s with %d", conn, w.Standing, w.Strikes, standing, strikes)
	}
}

var reputationTests = []test{
	{"Connect", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		want := store.Reputation{Pubkey: "pk1", AccountID: "wa", TokenHash: "tok-1", Standing: store.StandingActive,
			FirstSeen: at(1), LastSeen: at(1)}
		sameReputation(t, "reputation of a new identity", f.getReputation("wa", "pk1"), want)
		f.wantStanding("w1", store.StandingActive, 0)

		// The same identity again, on another connection and token.
		f.mustConnect("w2", "wa", "pk1", "tok-2", at(5))
		want.LastSeen, want.TokenHash = at(5), "tok-2"
		sameReputation(t, "reputation after a second connect", f.getReputation("wa", "pk1"), want)

		for _, id := range [][2]string{{"wa", "pk2"}, {"wb", "pk1"}} {
			_, err := f.s.GetReputation(f.ctx, id[0], id[1])
			wantErr(t, "GetReputation of "+id[1]+" on "+id[0], err, store.ErrNotFound)
		}
	}},
	{"Quarantine", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		for i := range store.QuarantineStrikes {
			r := f.judge(verdict(fmt.Sprint("j", i), "w1", "pk1", "tok-1", store.VerdictRejected, 1))
			if r.Strikes != int64(i+1) || r.JobsRejected != int64(i+1) || r.LastReason != fmt.Sprint("reason-j", i) {
				t.Errorf("after rejection %d: %+v", i+1, r)
			}
			standing := store.StandingActive
			if i+1 == store.QuarantineStrikes {
				standing = store.StandingQuarantined
			}
			if r.Standing != standing {
				t.Errorf("after %d strikes: %s, want %s", r.Strikes, r.Standing, standing)
			}
			f.wantStanding("w1", standing, int64(i+1))
		}
		// A new connection of the identity is quarantined too.
		f.mustConnect("w2", "wa", "pk1", "tok-1", at(2))
		f.wantStanding("w2", store.StandingQuarantined, store.QuarantineStrikes)
	}},
	{"CanaryRecovery", func(t *testing.T, f *fixture) {
		f.account("wa", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		r := f.judge(verdict("c1", "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.CanaryStrikes))
		if r.Standing != store.StandingQuarantined || r.Strikes != store.CanaryStrikes || r.CanariesFailed != 1 {
			t.Fatalf("after a failed canary: %+v", r)
		}
		f.wantStanding("w1", store.StandingQuarantined, store.CanaryStrikes)
		// Each passed canary takes CanaryCredit strikes back and earns;
		// trust comes back only at 0 strikes.
		for i, want := range []struct {
			strikes  int64
			standing store.Standing
		}{
			{store.CanaryStrikes - store.CanaryCredit, store.StandingQuarantined},
			{0, store.StandingActive},
			{0, store.StandingActive},
		} {
			v := verdict(fmt.Sprint("p", i), "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0)
			v.Earning = 2
			r = f.judge(v)
			if r.Strikes != want.strikes || r.Standing != want.standing {
				t.Errorf("after pass %d: %s with %d strikes, want %s with %d", i+1, r.Standing, r.Strikes, want.standing, want.strikes)
			}
			f.wantStanding("w1", want.standing, want.strikes)
		}
		if r.CanariesPassed != 3 || r.EarnedCredits != 6 {
			t.Errorf("reputation %+v, want 3 canaries passed, 6 credits earned", r)
		}
		if a := f.getAccount("wa"); a.Earned != 6 {
			t.Errorf("account earned %d, want 6", a.Earned)
		}
	}},
	{"Ban", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		f.mustConnect("other", "wa", "pk2", "tok-1", at(1))
		var r store.Reputation
		for i := range store.BanStrikes / store.CanaryStrikes {
			r = f.judge(verdict(fmt.Sprint("c", i), "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.CanaryStrikes))
		}
		if r.Standing != store.StandingBanned || r.Strikes != store.BanStrikes {
			t.Fatalf("after %d strikes: %+v, want banned", store.BanStrikes, r)
		}
		f.wantStanding("w1", store.StandingBanned, store.BanStrikes)
		// A ban is for good: passed canaries do not lift it.
		v := verdict("late-pass", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0)
		if r = f.judge(v); r.Standing != store.StandingBanned {
			t.Errorf("a passed canary lifted a ban: %+v", r)
		}
		// The identity cannot connect again, nor can another identity on
		// its token, nor the one already on it once it reconnects.
		for _, c := range []struct{ conn, pubkey string }{{"again", "pk1"}, {"fresh", "pk3"}, {"other2", "pk2"}} {
			err := f.s.PutWorker(f.ctx, store.Worker{Conn: c.conn, AccountID: "wa", TokenHash: "tok-1", Pubkey: c.pubkey,
				State: store.WorkerIdle, ConnectedAt: at(2)})
			wantErr(t, "PutWorker of "+c.pubkey+" on the banned token", err, store.ErrBanned)
			_, err = f.s.GetWorker(f.ctx, c.conn)
			wantErr(t, "GetWorker of a refused connection", err, store.ErrNotFound)
		}
		_, err := f.s.GetReputation(f.ctx, "wa", "pk3")
		wantErr(t, "GetReputation of an identity refused on a banned token", err, store.ErrNotFound)
		// The banned identity on another token, too.
		wantErr(t, "banned identity on a new token", f.connect("again", "wa", "pk1", "tok-2", at(3)), store.ErrBanned)
		// Another identity on another token is not concerned.
		f.mustConnect("fine", "wa", "pk4", "tok-2", at(3))
		f.wantStanding("fine", store.StandingActive, 0)
	}},
	{"TokenQuarantine", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		f.mustConnect("w2", "wa", "pk2", "tok-1", at(1))
		f.mustConnect("w9", "wa", "pk9", "tok-2", at(1))
		f.judge(verdict("c1", "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.QuarantineStrikes))
		// One identity's strikes are not yet the token's quarantine.
		f.mustConnect("new1", "wa", "pk3", "tok-1", at(2))
		f.wantStanding("new1", store.StandingActive, 0)
		f.judge(verdict("c2", "w2", "pk2", "tok-1", store.VerdictCanaryFailed, store.QuarantineStrikes))
		// Two of them are: a fresh identity connects quarantined, though
		// its own record is clean.
		f.mustConnect("new2", "wa", "pk4", "tok-1", at(3))
		f.wantStanding("new2", store.StandingQuarantined, 0)
		if r := f.getReputation("wa", "pk4"); r.Standing != store.StandingActive || r.Strikes != 0 {
			t.Errorf("reputation of the fresh identity %+v, want active", r)
		}
		// A verdict on a clean identity of the quarantined token gives
		// its live worker the token's standing.
		f.judge(verdict("p0", "new1", "pk3", "tok-1", store.VerdictCanaryPassed, 0))
		f.wantStanding("new1", store.StandingQuarantined, 0)
		// Another token is not concerned.
		f.mustConnect("new9", "wa", "pk5", "tok-2", at(3))
		f.wantStanding("new9", store.StandingActive, 0)
		// The token's strikes go as its identities' do: 3+3, then pk1
		// passes twice (-2, then the one strike it had left: -1) and pk2
		// twice (-2, -1). Only at 0 is the token trusted again.
		for i, v := range []store.Verdict{
			verdict("p1", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0), // token 4
			verdict("p2", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0), // token 3
			verdict("p3", "w2", "pk2", "tok-1", store.VerdictCanaryPassed, 0), // token 1
			verdict("p4", "w2", "pk2", "tok-1", store.VerdictCanaryPassed, 0), // token 0
		} {
			f.judge(v)
			conn := fmt.Sprint("probe", i)
			f.mustConnect(conn, "wa", fmt.Sprint("probe-pk", i), "tok-1", at(4))
			want := store.StandingQuarantined
			if i == 3 {
				want = store.StandingActive
			}
			f.wantStanding(conn, want, 0)
		}
		// pk1 is active again, with the token: its live worker says so.
		f.wantStanding("w1", store.StandingQuarantined, 0) // as of its last verdict, the token's 3 strikes
		f.judge(verdict("p5", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0))
		f.wantStanding("w1", store.StandingActive, 0)
	}},
	{"Idempotent", func(t *testing.T, f *fixture) {
		f.account("wa", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		rejected := verdict("j1", "w1", "pk1", "tok-1", store.VerdictRejected, 2)
		first := f.judge(rejected)
		pass := verdict("c1", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0)
		pass.Earning = 5
		afterPass := f.judge(pass)
		for _, v := range []store.Verdict{rejected, pass, rejected} {
			got, err := f.s.Judge(f.ctx, v)
			if err != nil {
				t.Fatalf("Judge %s again: %v", v.JobID, err)
			}
			sameReputation(t, "Judge "+v.JobID+" again", got, afterPass)
		}
		sameReputation(t, "reputation after retries", f.getReputation("wa", "pk1"), afterPass)
		if first.Strikes != 2 || afterPass.Strikes != 0 || afterPass.JobsRejected != 1 || afterPass.CanariesPassed != 1 ||
			afterPass.EarnedCredits != 5 {
			t.Errorf("reputation %+v, want one rejection and one pass counted", afterPass)
		}
		if a := f.getAccount("wa"); a.Earned != 5 {
			t.Errorf("account earned %d, want the canary's 5 once", a.Earned)
		}
		// The same job judged for another identity is another verdict.
		f.mustConnect("w2", "wa", "pk2", "tok-1", at(1))
		if r := f.judge(verdict("j1", "w2", "pk2", "tok-1", store.VerdictRejected, 2)); r.Strikes != 2 {
			t.Errorf("verdict on another identity for the same job: %+v", r)
		}
	}},
	{"NoLiveWorker", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		for i, conn := range []string{"w1", "never", ""} {
			f.judge(verdict(fmt.Sprint("j", i), conn, "pk1", "tok-1", store.VerdictRejected, 1))
		}
		if _, err := f.s.GetWorker(f.ctx, "w1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Judge recreated the disconnected worker: %v", err)
		}
		// A verdict on an identity the store never saw connect keeps a
		// record of it from then on.
		v := verdict("j9", "", "pk-unseen", "tok-1", store.VerdictRejected, 1)
		r, err := f.s.Judge(f.ctx, v)
		if err != nil {
			t.Fatalf("Judge of an unseen identity: %v", err)
		}
		want := store.Reputation{Pubkey: "pk-unseen", AccountID: "wa", TokenHash: "tok-1", Standing: store.StandingActive,
			FirstSeen: v.At, LastSeen: v.At}.Judged(v)
		sameReputation(t, "Judge of an unseen identity", r, want)
		sameReputation(t, "its reputation", f.getReputation("wa", "pk-unseen"), want)
		// A worker on another identity is not touched by a verdict that
		// names its connection.
		f.mustConnect("w2", "wa", "pk2", "tok-2", at(1))
		f.judge(verdict("j10", "w2", "pk1", "tok-1", store.VerdictRejected, 1))
		f.wantStanding("w2", store.StandingActive, 0)
	}},
	{"ConcurrentVerdicts", func(t *testing.T, f *fixture) {
		f.account("wa", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		f.mustConnect("w2", "wa", "pk2", "tok-1", at(1))
		// 20 rejections of pk1 and 20 passed canaries of pk2 race, on
		// one token: every one counts.
		const n = 20
		tally(t, race(2*n, func(i int) error {
			v := verdict(fmt.Sprint("j", i), "w1", "pk1", "tok-1", store.VerdictRejected, 1)
			if i%2 == 1 {
				v = verdict(fmt.Sprint("j", i), "w2", "pk2", "tok-1", store.VerdictCanaryPassed, 0)
				v.Earning = 1
			}
			_, err := f.s.Judge(f.ctx, v)
			return err
		}))
		if r := f.getReputation("wa", "pk1"); r.Strikes != n || r.JobsRejected != n || r.Standing != store.StandingBanned {
			t.Errorf("pk1 after %d concurrent rejections: %+v", n, r)
		}
		if r := f.getReputation("wa", "pk2"); r.CanariesPassed != n || r.EarnedCredits != n || r.Strikes != 0 {
			t.Errorf("pk2 after %d concurrent passes: %+v", n, r)
		}
		if a := f.getAccount("wa"); a.Earned != n {
			t.Errorf("account earned %d, want %d", a.Earned, n)
		}
		f.wantStanding("w1", store.StandingBanned, n)
		// pk1's ban banned the token: pk2's live worker took that from
		// whichever of its verdicts came after, or takes it on connect.
		err := f.s.PutWorker(f.ctx, store.Worker{Conn: "w3", AccountID: "wa", TokenHash: "tok-1", Pubkey: "pk2",
			State: store.WorkerIdle, ConnectedAt: at(2)})
		wantErr(t, "PutWorker on the banned token", err, store.ErrBanned)
	}},
	{"Complete", func(t *testing.T, f *fixture) {
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		want := f.getReputation("wa", "pk1")
		f.admit(key, "j1", "m1", 8, at(2))
		f.assign("j1", "w1", at(3))
		c := store.Completion{JobID: "j1", Worker: "w1", CompletionTokens: 20, MilliTokPerSec: 2500, Earning: 6, At: at(4)}
		for range 2 { // completing twice counts once
			if err := f.s.Complete(f.ctx, c); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}
		want.JobsCompleted, want.EarnedCredits, want.MilliTokPerSec = 1, 6, 2500
		sameReputation(t, "reputation after a completion", f.getReputation("wa", "pk1"), want)

		// Unmeasured speed: the last measure is kept.
		f.admit(key, "j2", "m1", 8, at(5))
		f.assign("j2", "w1", at(6))
		c = store.Completion{JobID: "j2", Worker: "w1", Earning: 1, At: at(7)}
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		want.JobsCompleted, want.EarnedCredits = 2, 7
		sameReputation(t, "reputation after an unmeasured completion", f.getReputation("wa", "pk1"), want)

		// A canary counts nowhere there: its verdict does.
		r := request(key, "canary", "m1", 8, at(8))
		r.Job.Canary, r.Job.Target = true, "w1"
		if _, err := f.s.Admit(f.ctx, r); err != nil {
			t.Fatalf("Admit canary: %v", err)
		}
		f.assign("canary", "w1", at(9))
		c = store.Completion{JobID: "canary", Worker: "w1", CompletionTokens: 20, MilliTokPerSec: 9999, At: at(10)}
		if err := f.s.Complete(f.ctx, c); err != nil {
			t.Fatalf("Complete canary: %v", err)
		}
		sameReputation(t, "reputation after a canary's completion", f.getReputation("wa", "pk1"), want)
		// After the worker is gone, the completion still counts.
		f.admit(key, "j3", "m1", 8, at(11))
		f.assign("j3", "w1", at(12))
		if _, err := f.s.DeleteWorker(f.ctx, "w1"); err != nil {
			t.Fatalf("DeleteWorker: %v", err)
		}
		f.complete("j3", "w1", at(13))
		want.JobsCompleted, want.EarnedCredits, want.MilliTokPerSec = 3, 8, 2000
		sameReputation(t, "reputation after a completion without the worker", f.getReputation("wa", "pk1"), want)
	}},
	{"CompleteOutOfStanding", func(t *testing.T, f *fixture) {
		// Work that was running when its identity was judged is not
		// accepted: quarantined, its real jobs are refused; banned, its
		// canaries still pass but earn nothing.
		key := f.payer("payer", 100, 0)
		f.account("wa", 0, 0)
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		f.admit(key, "j1", "m1", 8, at(2))
		f.assign("j1", "w1", at(3))
		f.judge(verdict("c1", "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.CanaryStrikes))
		want := f.getReputation("wa", "pk1")
		c := store.Completion{JobID: "j1", Worker: "w1", CompletionTokens: 20, Earning: 6, At: at(4)}
		wantErr(t, "Complete of a quarantined identity's job", f.s.Complete(f.ctx, c), store.ErrNotActive)
		sameReputation(t, "reputation after a refused completion", f.getReputation("wa", "pk1"), want)
		if j := f.getJob("j1"); j.State != store.JobAssigned || j.Worker != "w1" {
			t.Errorf("refused job is %s on %q, want still assigned to w1", j.State, j.Worker)
		}
		if a := f.getAccount("wa"); a.Earned != 0 {
			t.Errorf("worker account earned %d for refused work", a.Earned)
		}
		// The caller fails it with a refund: the user pays nothing.
		f.fail("j1", true, at(5))
		if a := f.getAccount("payer"); a.Credits != 100 {
			t.Errorf("payer has %d credits after the refund, want 100", a.Credits)
		}

		// Banned with a canary in flight: it passes, and earns nothing.
		for i := range store.BanStrikes/store.CanaryStrikes - 1 {
			f.judge(verdict(fmt.Sprint("c", i+2), "w1", "pk1", "tok-1", store.VerdictCanaryFailed, store.CanaryStrikes))
		}
		if r := f.getReputation("wa", "pk1"); r.Standing != store.StandingBanned {
			t.Fatalf("after %d strikes: %+v, want banned", store.BanStrikes, r)
		}
		v := verdict("late-pass", "w1", "pk1", "tok-1", store.VerdictCanaryPassed, 0)
		v.Earning = 2
		if r := f.judge(v); r.EarnedCredits != 0 || r.CanariesPassed != 1 {
			t.Errorf("a banned identity's passed canary: %+v, want counted, 0 credits earned", r)
		}
		if a := f.getAccount("wa"); a.Earned != 0 {
			t.Errorf("worker account earned %d after its ban", a.Earned)
		}
	}},
	{"List", func(t *testing.T, f *fixture) {
		for _, id := range []struct{ conn, account, pubkey string }{
			{"c1", "wa", "pk-b"}, {"c2", "wa", "pk-a"}, {"c3", "wb", "pk-c"}, {"c4", "w", "pk-z"}, {"c5", "wa", "pk-c"},
		} {
			f.mustConnect(id.conn, id.account, id.pubkey, "tok-"+id.account, at(1))
		}
		// Seen again on another connection: still one record.
		f.mustConnect("c6", "wa", "pk-a", "tok-wa", at(2))
		ids := func(account string) []string {
			t.Helper()
			rs, err := f.s.Reputations(f.ctx, account)
			if err != nil {
				t.Fatalf("Reputations(%q): %v", account, err)
			}
			out := []string{}
			for _, r := range rs {
				out = append(out, r.AccountID+"/"+r.Pubkey)
				sameReputation(t, "listed reputation", r, f.getReputation(r.AccountID, r.Pubkey))
			}
			return out
		}
		for account, want := range map[string][]string{
			"wa":     {"wa/pk-a", "wa/pk-b", "wa/pk-c"},
			"w":      {"w/pk-z"},
			"wb":     {"wb/pk-c"},
			"nobody": {},
			"":       {"w/pk-z", "wa/pk-a", "wa/pk-b", "wa/pk-c", "wb/pk-c"},
		} {
			if got := ids(account); !slices.Equal(got, want) {
				t.Errorf("Reputations(%q) = %v, want %v", account, got, want)
			}
		}
	}},
	{"Trusted", func(t *testing.T, f *fixture) {
		f.mustConnect("w1", "wa", "pk1", "tok-1", at(1))
		want := f.getReputation("wa", "pk1")
		for _, trusted := range []bool{true, false, true} {
			if err := f.s.SetTrusted(f.ctx, "wa", "pk1", trusted); err != nil {
				t.Fatalf("SetTrusted %v: %v", trusted, err)
			}
			want.Trusted = trusted
			sameReputation(t, fmt.Sprintf("after SetTrusted %v", trusted), f.getReputation("wa", "pk1"), want)
		}
		// A verdict and a reconnect keep the mark.
		f.judge(verdict("j1", "w1", "pk1", "tok-1", store.VerdictRejected, 1))
		f.mustConnect("w2", "wa", "pk1", "tok-1", at(2))
		if r := f.getReputation("wa", "pk1"); !r.Trusted {
			t.Errorf("trust lost: %+v", r)
		}
		for _, id := range [][2]string{{"wa", "pk2"}, {"wb", "pk1"}} {
			wantErr(t, "SetTrusted of "+id[1]+" on "+id[0], f.s.SetTrusted(f.ctx, id[0], id[1], true), store.ErrNotFound)
			_, err := f.s.GetReputation(f.ctx, id[0], id[1])
			wantErr(t, "GetReputation after SetTrusted of an unknown identity", err, store.ErrNotFound)
		}
	}},
}
