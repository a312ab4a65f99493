package store_test

import (
	"testing"

	"github.com/c0mpute/c0mpute/functions/store"
)

func TestTokenJudged(t *testing.T) {
	const (
		active      = store.StandingActive
		quarantined = store.StandingQuarantined
		banned      = store.StandingBanned
	)
	rep := func(strikes int64, s store.Standing) store.Reputation {
		return store.Reputation{Strikes: strikes, Standing: s}
	}
	for _, tc := range []struct {
		name          string
		from          store.Standing
		strikes       int64
		before, after store.Reputation
		want          store.Standing
		wantStrikes   int64
	}{
		{"a rejection adds its strikes", active, 2, rep(0, active), rep(1, active), active, 3},
		{"up to the token's quarantine", active, 3, rep(0, active), rep(3, quarantined), quarantined, 6},
		{"a pass gives back what it took back", quarantined, 6, rep(3, quarantined), rep(1, quarantined), quarantined, 4},
		{"only what it took back", quarantined, 4, rep(1, quarantined), rep(0, active), quarantined, 3},
		{"nothing from a clean identity", quarantined, 3, rep(0, active), rep(0, active), quarantined, 3},
		{"trusted again at 0", quarantined, 1, rep(1, quarantined), rep(0, active), active, 0},
		{"never below 0", active, 0, rep(2, active), rep(0, active), active, 0},
		{"banned with the identity", active, 0, rep(6, quarantined), rep(9, banned), banned, 3},
		{"banned for good", banned, 0, rep(0, active), rep(0, active), banned, 0},
	} {
		got, strikes := store.TokenJudged(tc.from, tc.strikes, tc.before, tc.after)
		if got != tc.want || strikes != tc.wantStrikes {
			t.Errorf("%s: %s with %d strikes, want %s with %d", tc.name, got, strikes, tc.want, tc.wantStrikes)
		}
	}
}

func TestVerdictCheck(t *testing.T) {
	ok := store.Verdict{JobID: "j", Pubkey: "pk", AccountID: "a", Kind: store.VerdictRejected, Strikes: 1}
	if err := ok.Check(); err != nil {
		t.Errorf("Check of %+v: %v", ok, err)
	}
	for name, change := range map[string]func(*store.Verdict){
		"no job":           func(v *store.Verdict) { v.JobID = "" },
		"no pubkey":        func(v *store.Verdict) { v.Pubkey = "" },
		"no account":       func(v *store.Verdict) { v.AccountID = "" },
		"unknown kind":     func(v *store.Verdict) { v.Kind = "fine" },
		"negative earning": func(v *store.Verdict) { v.Earning = -1 },
	} {
		v := ok
		change(&v)
		if v.Check() == nil {
			t.Errorf("Check passed a verdict with %s", name)
		}
	}
}

func TestRegisteredCaps(t *testing.T) {
	caps := map[string]store.Caps{"m1": {Tools: true}, "m2": {}, "other": {Vision: true}}
	got := store.RegisteredCaps([]string{"m1", "m2", "m3"}, caps)
	if len(got) != 2 || got["m1"] != caps["m1"] || got["m2"] != caps["m2"] {
		t.Errorf("RegisteredCaps = %v", got)
	}
	if got := store.RegisteredCaps([]string{"m3"}, caps); got != nil {
		t.Errorf("RegisteredCaps of no registered model = %v, want nil", got)
	}
}

// A cheater that fails a canary, passes its way out of quarantine and
// fails again is banned at its fourth failure; an honest worker's rare
// failure among many passes is not.
func TestRevolvingDoorIsBanned(t *testing.T) {
	var r store.Reputation
	fail := store.Verdict{Kind: store.VerdictCanaryFailed, Strikes: store.CanaryStrikes}
	pass := store.Verdict{Kind: store.VerdictCanaryPassed}
	for cycle := 1; cycle <= store.BanCanaryFailures; cycle++ {
		r = r.Judged(fail)
		if cycle < store.BanCanaryFailures {
			if r.Standing != store.StandingQuarantined {
				t.Fatalf("cycle %d: %s after a failed canary, want quarantined", cycle, r.Standing)
			}
			r = r.Judged(pass).Judged(pass)
			if r.Standing != store.StandingActive {
				t.Fatalf("cycle %d: %s after two passes, want active", cycle, r.Standing)
			}
		}
	}
	if r.Standing != store.StandingBanned {
		t.Errorf("after %d failures in quarantine cycles: %s, want banned", store.BanCanaryFailures, r.Standing)
	}
	var honest store.Reputation
	for i := range 200 {
		if i%50 == 0 {
			honest = honest.Judged(fail)
		}
		honest = honest.Judged(pass)
	}
	if honest.Standing != store.StandingActive || honest.CanariesFailed != 4 {
		t.Errorf("an honest worker with 4 failures in 200 canaries: %s", honest.Standing)
	}
}
