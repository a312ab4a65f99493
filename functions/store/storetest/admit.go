package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

var admitTests = []test{
	{"Debit", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		r := request(key, "j1", "m1", 30, at(1))
		r.Job.AccountID = "a1"
		adm, err := f.s.Admit(f.ctx, r)
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		if adm.KeyRequests != 1 || adm.AccountRequests != 1 {
			t.Errorf("counts %d (key), %d (account); want 1, 1", adm.KeyRequests, adm.AccountRequests)
		}
		got := adm.Job
		want := store.Job{
			ID: "j1", AccountID: "a1", Model: "m1", Price: 30, State: store.JobQueued,
			Listener: "listener-1", Created: at(1), Updated: got.Updated, KeyHash: key,
		}
		sameJob(t, "Admit result", got, want)
		sameJob(t, "GetJob", f.getJob("j1"), got)
		a := f.getAccount("a1")
		if a.Credits != 70 || a.TotalSpent != 30 || a.FreeAllowanceLeft != 0 {
			t.Errorf("account %+v, want credits 70, spent 30", a)
		}
		_, err = f.s.GetJob(f.ctx, "j-missing")
		wantErr(t, "GetJob missing", err, store.ErrNotFound)
	}},
	{"CanaryTargetNeeds", func(t *testing.T, f *fixture) {
		// A canary aimed at one worker, and what a job needs, stay with
		// the job through every step.
		key := f.payer("a1", 100, 0)
		f.worker("w1", "wa", "m1")
		r := request(key, "j1", "m1", 5, at(1))
		r.Job.Canary, r.Job.Target = true, "w1"
		r.Job.Needs = store.Needs{Vision: true, Tools: true, ResponseFormat: true, Context: 8192}
		adm, err := f.s.Admit(f.ctx, r)
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
		want := adm.Job
		if !want.Canary || want.Target != "w1" || want.Needs != r.Job.Needs {
			t.Fatalf("Admit result %+v lost the canary, target or needs", want)
		}
		sameJob(t, "GetJob", f.getJob("j1"), want)
		queued, err := f.s.QueuedJobs(f.ctx, "m1", 10)
		if err != nil || len(queued) != 1 {
			t.Fatalf("QueuedJobs: %v, %v", queued, err)
		}
		sameJob(t, "QueuedJobs", queued[0], want)

		got := f.assign("j1", "w1", at(2))
		if !got.Canary || got.Target != "w1" || got.Needs != want.Needs {
			t.Errorf("Assign result %+v lost the canary, target or needs", got)
		}
		sameJob(t, "GetJob after Assign", f.getJob("j1"), got)

		requeued, err := f.s.Requeue(f.ctx, "j1", "w1", at(3))
		if err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		want.Attempts, want.Updated = 1, at(3)
		sameJob(t, "Requeue result", requeued, want)
		sameJob(t, "GetJob after Requeue", f.getJob("j1"), want)

		f.assign("j1", "w1", at(4))
		failed, err := f.s.Fail(f.ctx, "j1", "canary_timeout", true, at(5))
		if err != nil {
			t.Fatalf("Fail: %v", err)
		}
		if !failed.Canary || failed.Target != "w1" || failed.Needs != want.Needs {
			t.Errorf("Fail result %+v lost the canary, target or needs", failed)
		}
		sameJob(t, "GetJob after Fail", f.getJob("j1"), failed)
	}},
	{"AccountFromKey", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		j := f.admit(key, "j1", "m1", 1, at(1)) // request leaves AccountID empty
		if j.AccountID != "a1" || f.getJob("j1").AccountID != "a1" {
			t.Errorf("job account %q, want the key's account a1", j.AccountID)
		}
	}},
	{"AllowanceFirst", func(t *testing.T, f *fixture) {
		for _, tc := range []struct {
			allowance, credits, price          int64
			fromAllowance, allowLeft, credLeft int64
			err                                error
		}{
			{allowance: 0, credits: 10, price: 3, fromAllowance: 0, allowLeft: 0, credLeft: 7},
			{allowance: 5, credits: 10, price: 3, fromAllowance: 3, allowLeft: 2, credLeft: 10},
			{allowance: 5, credits: 0, price: 5, fromAllowance: 5, allowLeft: 0, credLeft: 0},
			{allowance: 2, credits: 10, price: 5, fromAllowance: 2, allowLeft: 0, credLeft: 7},
			{allowance: 2, credits: 3, price: 5, fromAllowance: 2, allowLeft: 0, credLeft: 0},
			{allowance: 0, credits: 0, price: 0, fromAllowance: 0, allowLeft: 0, credLeft: 0},
			{allowance: 2, credits: 2, price: 5, err: store.ErrInsufficientCredits},
			{allowance: 5, credits: 0, price: 6, err: store.ErrInsufficientCredits},
			{allowance: 0, credits: 4, price: 5, err: store.ErrInsufficientCredits},
		} {
			name := fmt.Sprintf("allowance=%d,credits=%d,price=%d", tc.allowance, tc.credits, tc.price)
			t.Run(name, func(t *testing.T) {
				f := f.with(t)
				id := "acct-" + name
				key := f.payer(id, tc.credits, tc.allowance)
				before := f.getAccount(id)
				adm, err := f.s.Admit(f.ctx, request(key, "job-"+name, "m1", tc.price, at(1)))
				wantErr(t, "Admit", err, tc.err)
				j := adm.Job
				a := f.getAccount(id)
				if tc.err != nil {
					sameAccount(t, "account after a refused Admit", a, before)
					return
				}
				if j.FromAllowance != tc.fromAllowance || f.getJob(j.ID).FromAllowance != tc.fromAllowance {
					t.Errorf("FromAllowance %d, want %d", j.FromAllowance, tc.fromAllowance)
				}
				if a.FreeAllowanceLeft != tc.allowLeft || a.Credits != tc.credLeft || a.TotalSpent != tc.price {
					t.Errorf("allowance %d, credits %d, spent %d; want %d, %d, %d",
						a.FreeAllowanceLeft, a.Credits, a.TotalSpent, tc.allowLeft, tc.credLeft, tc.price)
				}
				// The refund returns each part to the bucket it came from;
				// the request that cost something stays the last one.
				if _, err := f.s.Fail(f.ctx, j.ID, "no_worker", true, at(2)); err != nil {
					t.Fatalf("Fail: %v", err)
				}
				if tc.price > 0 {
					before.LastRequest = at(1)
				}
				sameAccount(t, "account after refund", f.getAccount(id), before)
			})
		}
	}},
	{"Refused", func(t *testing.T, f *fixture) {
		for _, tc := range []struct {
			name  string
			setup func(f *fixture) store.AdmitRequest
			err   error // nil: any error
		}{
			{"RevokedKey", func(f *fixture) store.AdmitRequest {
				key := f.payer("revoked", 100, 0)
				sec, err := f.s.GetAPIKey(f.ctx, key)
				if err != nil {
					f.t.Fatalf("GetAPIKey: %v", err)
				}
				if err := f.s.RevokeAPIKey(f.ctx, "revoked", sec.ID, at(1)); err != nil {
					f.t.Fatalf("RevokeAPIKey: %v", err)
				}
				return request(key, "j-revoked", "m1", 1, at(2))
			}, store.ErrRevoked},
			{"UnknownKey", func(f *fixture) store.AdmitRequest {
				f.account("unknown", 100, 0)
				return request("no-such-key", "j-unknown", "m1", 1, at(2))
			}, store.ErrNotFound},
			{"MissingAccount", func(f *fixture) store.AdmitRequest {
				return request(f.key("ghost"), "j-ghost", "m1", 1, at(2))
			}, store.ErrNotFound},
			{"InsufficientCredits", func(f *fixture) store.AdmitRequest {
				return request(f.payer("poor", 4, 0), "j-poor", "m1", 5, at(2))
			}, store.ErrInsufficientCredits},
			{"OtherAccountsJob", func(f *fixture) store.AdmitRequest {
				f.account("victim", 100, 0)
				r := request(f.payer("thief", 100, 0), "j-thief", "m1", 5, at(2))
				r.Job.AccountID = "victim"
				return r
			}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := f.with(t)
				r := tc.setup(f)
				accounts, _ := f.s.GetAccount(f.ctx, "victim")
				_, err := f.s.Admit(f.ctx, r)
				if tc.err == nil && err == nil {
					t.Fatal("Admit: no error")
				}
				if tc.err != nil {
					wantErr(t, "Admit", err, tc.err)
				}
				_, err = f.s.GetJob(f.ctx, r.Job.ID)
				wantErr(t, "GetJob of the refused job", err, store.ErrNotFound)
				if q := f.queued("m1"); slices.Contains(q, r.Job.ID) {
					t.Errorf("refused job queued: %v", q)
				}
				if after, _ := f.s.GetAccount(f.ctx, "victim"); after != accounts {
					t.Errorf("victim account changed: %+v", after)
				}
				for _, id := range []string{"revoked", "unknown", "poor", "thief"} {
					if a, err := f.s.GetAccount(f.ctx, id); err == nil && a.TotalSpent != 0 {
						t.Errorf("account %s charged by a refused Admit: %+v", id, a)
					}
				}
			})
		}
	}},
	{"DuplicateJobID", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		first := f.admit(key, "j1", "m1", 10, at(1))
		_, err := f.s.Admit(f.ctx, request(key, "j1", "m2", 10, at(2)))
		wantErr(t, "Admit same id", err, store.ErrExists)
		if a := f.getAccount("a1"); a.Credits != 90 {
			t.Errorf("credits %d, want 90 (charged once)", a.Credits)
		}
		sameJob(t, "job after duplicate Admit", f.getJob("j1"), first)
	}},
	{"RateLimit", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 100, 0)
		other := f.key("a1")
		limited := func(key, id string, w time.Time) error {
			r := request(key, id, "m1", 1, at(1))
			r.Window, r.Limit = w, 3
			_, err := f.s.Admit(f.ctx, r)
			return err
		}
		for i := range 3 {
			wantErr(t, fmt.Sprintf("Admit %d", i), limited(key, fmt.Sprintf("j%d", i), window), nil)
		}
		wantErr(t, "Admit over the limit", limited(key, "j3", window), store.ErrRateLimited)
		if a := f.getAccount("a1"); a.Credits != 97 {
			t.Errorf("credits %d, want 97 (a refused request costs nothing)", a.Credits)
		}
		wantErr(t, "another key in the same window", limited(other, "j4", window), nil)
		wantErr(t, "the next window", limited(key, "j5", window.Add(time.Minute)), nil)
		wantErr(t, "the full window still", limited(key, "j6", window), store.ErrRateLimited)
	}},
	{"RateLimitCountsOnlyAdmitted", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 0, 0)
		try := func(id string) error {
			r := request(key, id, "m1", 5, at(1))
			r.Limit = 2
			_, err := f.s.Admit(f.ctx, r)
			return err
		}
		for i := range 3 {
			wantErr(t, "Admit without credits", try(fmt.Sprintf("poor%d", i)), store.ErrInsufficientCredits)
		}
		if _, err := f.s.Grant(f.ctx, "a1", 100, "g1", true); err != nil {
			t.Fatalf("Grant: %v", err)
		}
		wantErr(t, "first paid Admit", try("j1"), nil)
		wantErr(t, "duplicate id", try("j1"), store.ErrExists)
		wantErr(t, "second paid Admit", try("j2"), nil)
		wantErr(t, "third paid Admit", try("j3"), store.ErrRateLimited)
	}},
	{"ConcurrentBalance", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 70, 0)
		// 1,000 debits race for a balance that pays for 10.
		errs := race(1000, func(i int) error {
			_, err := f.s.Admit(f.ctx, request(key, fmt.Sprintf("j%04d", i), "m1", 7, at(i)))
			return err
		})
		ok, by := tally(t, errs, store.ErrInsufficientCredits)
		if ok != 10 || by[store.ErrInsufficientCredits] != 990 {
			t.Errorf("%d admitted, %d ErrInsufficientCredits; want 10, 990", ok, by[store.ErrInsufficientCredits])
		}
		if a := f.getAccount("a1"); a.Credits != 0 || a.TotalSpent != 70 {
			t.Errorf("credits %d, spent %d; want 0, 70", a.Credits, a.TotalSpent)
		}
		if q := f.queued("m1"); len(q) != 10 {
			t.Errorf("%d queued, want 10", len(q))
		}
	}},
	{"ConcurrentAllowanceThenRefund", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 40, 30)
		jobs := make([]store.Admission, 50)
		errs := race(50, func(i int) error {
			var err error
			jobs[i], err = f.s.Admit(f.ctx, request(key, fmt.Sprintf("j%02d", i), "m1", 7, at(i)))
			return err
		})
		ok, _ := tally(t, errs, store.ErrInsufficientCredits)
		if ok != 10 {
			t.Fatalf("%d admitted, want 10 (30 allowance + 40 credits at 7 each)", ok)
		}
		var fromAllowance int64
		var admitted []string
		for i, j := range jobs {
			if errs[i] == nil {
				fromAllowance += j.Job.FromAllowance
				admitted = append(admitted, j.Job.ID)
			}
		}
		if fromAllowance != 30 {
			t.Errorf("drawn from allowance %d, want 30", fromAllowance)
		}
		if a := f.getAccount("a1"); a.Credits != 0 || a.FreeAllowanceLeft != 0 || a.TotalSpent != 70 {
			t.Errorf("account %+v, want all spent", a)
		}
		tally(t, race(len(admitted), func(i int) error {
			_, err := f.s.Fail(f.ctx, admitted[i], "worker_lost", true, at(100))
			return err
		}))
		if a := f.getAccount("a1"); a.Credits != 40 || a.FreeAllowanceLeft != 30 || a.TotalSpent != 0 {
			t.Errorf("after refunds: credits %d, allowance %d, spent %d; want 40, 30, 0",
				a.Credits, a.FreeAllowanceLeft, a.TotalSpent)
		}
	}},
	{"ConcurrentRateLimit", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1_000_000, 0)
		errs := race(100, func(i int) error {
			r := request(key, fmt.Sprintf("j%03d", i), "m1", 3, at(i))
			r.Limit = 60
			_, err := f.s.Admit(f.ctx, r)
			return err
		})
		ok, by := tally(t, errs, store.ErrRateLimited)
		if ok != 60 || by[store.ErrRateLimited] != 40 {
			t.Errorf("%d admitted, %d ErrRateLimited; want 60, 40", ok, by[store.ErrRateLimited])
		}
		if a := f.getAccount("a1"); a.TotalSpent != 180 {
			t.Errorf("spent %d, want 180", a.TotalSpent)
		}
	}},
	{"AccountLimitAcrossKeys", func(t *testing.T, f *fixture) {
		keys := []string{f.payer("a1", 1000, 0), f.key("a1"), f.key("a1")}
		try := func(key string, w time.Time) (store.Admission, error) {
			r := request(key, fmt.Sprintf("j%03d", f.next()), "m1", 1, at(1))
			r.Window, r.AccountLimit = w, 5
			return f.s.Admit(f.ctx, r)
		}
		// Five requests spread over three keys fill the account's window;
		// no key is near its own limit.
		for i, want := range []struct{ key, keyCount int64 }{{0, 1}, {1, 1}, {2, 1}, {0, 2}, {1, 2}} {
			adm, err := try(keys[want.key], window)
			if err != nil {
				t.Fatalf("Admit %d: %v", i, err)
			}
			if adm.KeyRequests != want.keyCount || adm.AccountRequests != int64(i+1) {
				t.Errorf("Admit %d: counts %d (key), %d (account); want %d, %d",
					i, adm.KeyRequests, adm.AccountRequests, want.keyCount, i+1)
			}
		}
		for i, key := range keys {
			_, err := try(key, window)
			wantErr(t, fmt.Sprintf("key %d over the account's limit", i), err, store.ErrRateLimited)
		}
		if a := f.getAccount("a1"); a.Credits != 995 || a.TotalSpent != 5 {
			t.Errorf("credits %d, spent %d; want 995, 5 (a refused request costs nothing)", a.Credits, a.TotalSpent)
		}
		if q := f.queued("m1"); len(q) != 5 {
			t.Errorf("%d queued, want 5", len(q))
		}
		// A new key does not reset the account's window.
		_, err := try(f.key("a1"), window)
		wantErr(t, "a new key in the full window", err, store.ErrRateLimited)
		adm, err := try(keys[2], window.Add(time.Minute))
		wantErr(t, "the next window", err, nil)
		if adm.KeyRequests != 1 || adm.AccountRequests != 1 {
			t.Errorf("next window: counts %d, %d; want 1, 1", adm.KeyRequests, adm.AccountRequests)
		}
		// Another account is not limited by this one.
		_, err = try(f.payer("a2", 10, 0), window)
		wantErr(t, "another account in the same window", err, nil)
	}},
	{"RefusedCountsNowhere", func(t *testing.T, f *fixture) {
		a, b := f.payer("a1", 1000, 0), f.key("a1")
		try := func(key string, limit, accountLimit int64) (store.Admission, error) {
			r := request(key, fmt.Sprintf("j%03d", f.next()), "m1", 1, at(1))
			r.Limit, r.AccountLimit = limit, accountLimit
			return f.s.Admit(f.ctx, r)
		}
		for range 2 {
			if _, err := try(a, 2, 3); err != nil {
				t.Fatalf("Admit: %v", err)
			}
		}
		_, err := try(a, 2, 3)
		wantErr(t, "over the key's limit", err, store.ErrRateLimited)
		// The key's refusal did not count against the account: b gets
		// the account's third request.
		adm, err := try(b, 2, 3)
		wantErr(t, "the account's last request", err, nil)
		if adm.KeyRequests != 1 || adm.AccountRequests != 3 {
			t.Errorf("counts %d (key), %d (account); want 1, 3", adm.KeyRequests, adm.AccountRequests)
		}
		_, err = try(b, 2, 3)
		wantErr(t, "over the account's limit", err, store.ErrRateLimited)
		// Nor did the account's refusal count against b: with the
		// account's cap lifted, b has one request left.
		adm, err = try(b, 2, 0)
		wantErr(t, "without an account cap", err, nil)
		if adm.KeyRequests != 2 || adm.AccountRequests != 4 {
			t.Errorf("counts %d (key), %d (account); want 2, 4", adm.KeyRequests, adm.AccountRequests)
		}
		// Refusals for other reasons count nowhere either.
		poor := f.key("a1")
		for range 2 {
			r := request(poor, fmt.Sprintf("j%03d", f.next()), "m1", 1_000_000, at(1))
			r.AccountLimit = 100
			_, err := f.s.Admit(f.ctx, r)
			wantErr(t, "Admit without the credits", err, store.ErrInsufficientCredits)
		}
		adm, err = try(poor, 2, 100)
		wantErr(t, "Admit after two refusals", err, nil)
		if adm.KeyRequests != 1 || adm.AccountRequests != 5 {
			t.Errorf("counts %d (key), %d (account); want 1, 5", adm.KeyRequests, adm.AccountRequests)
		}
	}},
	{"NoAccountLimit", func(t *testing.T, f *fixture) {
		keys := []string{f.payer("a1", 1000, 0), f.key("a1"), f.key("a1")}
		for i := range 12 {
			r := request(keys[i%3], fmt.Sprintf("j%02d", i), "m1", 1, at(i))
			r.Limit, r.AccountLimit = 4, 0
			adm, err := f.s.Admit(f.ctx, r)
			if err != nil {
				t.Fatalf("Admit %d: %v", i, err)
			}
			if adm.KeyRequests != int64(i/3+1) || adm.AccountRequests != int64(i+1) {
				t.Errorf("Admit %d: counts %d (key), %d (account); want %d, %d",
					i, adm.KeyRequests, adm.AccountRequests, i/3+1, i+1)
			}
		}
	}},
	{"ConcurrentAccountLimit", func(t *testing.T, f *fixture) {
		keys := []string{f.payer("a1", 1_000_000, 0)}
		for range store.MaxActiveKeys - 1 {
			keys = append(keys, f.key("a1"))
		}
		// 100 requests race over 5 keys, each key well within its own
		// limit, for an account that may make 30.
		adms := make([]store.Admission, 100)
		errs := race(100, func(i int) error {
			r := request(keys[i%len(keys)], fmt.Sprintf("j%03d", i), "m1", 3, at(i))
			r.Limit, r.AccountLimit = 60, 30
			var err error
			adms[i], err = f.s.Admit(f.ctx, r)
			return err
		})
		ok, by := tally(t, errs, store.ErrRateLimited)
		if ok != 30 || by[store.ErrRateLimited] != 70 {
			t.Errorf("%d admitted, %d ErrRateLimited; want 30, 70", ok, by[store.ErrRateLimited])
		}
		if a := f.getAccount("a1"); a.TotalSpent != 90 {
			t.Errorf("spent %d, want 90", a.TotalSpent)
		}
		if q := f.queued("m1"); len(q) != 30 {
			t.Errorf("%d queued, want 30", len(q))
		}
		// Each admitted request has its own place in the account's window.
		var counts []int64
		for i, adm := range adms {
			if errs[i] == nil {
				counts = append(counts, adm.AccountRequests)
			}
		}
		slices.Sort(counts)
		for i, c := range counts {
			if c != int64(i+1) {
				t.Errorf("account counts of the admitted requests %v, want 1 to %d", counts, len(counts))
				break
			}
		}
	}},
}

var queueTests = []test{
	{"OldestFirstPerModel", func(t *testing.T, f *fixture) {
		key := f.payer("a1", 1000, 0)
		// Admitted out of age order; jb and ja tie on Created, so ID decides.
		for _, j := range []struct {
			id, model string
			created   time.Time
		}{
			{"jd", "m1", at(400)}, {"jb", "m1", at(200)}, {"jx", "m2", at(50)},
			{"ja", "m1", at(200)}, {"jc", "m1", at(300)}, {"je", "m1", at(100)},
		} {
			f.admit(key, j.id, j.model, 1, j.created)
		}
		if got, want := f.queued("m1"), []string{"je", "ja", "jb", "jc", "jd"}; !slices.Equal(got, want) {
			t.Errorf("m1 queue %v, want %v", got, want)
		}
		if got := f.queued("m2"); !slices.Equal(got, []string{"jx"}) {
			t.Errorf("m2 queue %v, want [jx]", got)
		}
		if got := f.queued("m3"); len(got) != 0 {
			t.Errorf("m3 queue %v, want empty", got)
		}
		top, err := f.s.QueuedJobs(f.ctx, "m1", 2)
		if err != nil {
			t.Fatalf("QueuedJobs: %v", err)
		}
		if len(top) != 2 || top[0].ID != "je" || top[1].ID != "ja" {
			t.Errorf("QueuedJobs limit 2: %v", top)
		}
		sameJob(t, "queued job", top[0], f.getJob("je"))

		f.worker("w1", "wa", "m1")
		f.assign("ja", "w1", at(500))
		if _, err := f.s.Fail(f.ctx, "jc", "queue_timeout", true, at(500)); err != nil {
			t.Fatalf("Fail: %v", err)
		}
		if got, want := f.queued("m1"), []string{"je", "jb", "jd"}; !slices.Equal(got, want) {
			t.Errorf("m1 queue after assign and fail %v, want %v", got, want)
		}
	}},
}
