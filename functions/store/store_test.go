package store_test

import (
	"testing"
	"time"

	"github.com/c0mpute/c0mpute/functions/store"
)

func date(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestPeriodOf(t *testing.T) {
	for _, tc := range []struct {
		reset, at, want string
	}{
		{store.ResetDaily, "2026-12-01T00:00:00Z", "2026-12-01"},
		{store.ResetDaily, "2026-12-01T23:59:59.999999999Z", "2026-12-01"},
		{store.ResetDaily, "2026-12-02T01:00:00+02:00", "2026-12-01"}, // UTC, not local time
		{store.ResetDaily, "2026-12-31T23:59:59Z", "2026-12-31"},
		{store.ResetDaily, "2027-01-01T00:00:00Z", "2027-01-01"},

		// ISO 8601 weeks start on Monday; week 1 holds the year's first
		// Thursday, so its edges cross years.
		{store.ResetWeekly, "2026-12-01T12:00:00Z", "2026-W49"},      // a Tuesday
		{store.ResetWeekly, "2026-11-29T23:59:59Z", "2026-W48"},      // Sunday ends a week
		{store.ResetWeekly, "2026-11-30T00:00:00Z", "2026-W49"},      // Monday starts one
		{store.ResetWeekly, "2026-01-01T00:00:00Z", "2026-W01"},      // a Thursday: week 1
		{store.ResetWeekly, "2024-12-29T23:59:59Z", "2024-W52"},      // Sunday
		{store.ResetWeekly, "2024-12-30T00:00:00Z", "2025-W01"},      // Monday, still December
		{store.ResetWeekly, "2021-01-01T00:00:00Z", "2020-W53"},      // a Friday: last year's week 53
		{store.ResetWeekly, "2027-01-03T23:59:59Z", "2026-W53"},      // Sunday after New Year
		{store.ResetWeekly, "2027-01-04T00:00:00Z", "2027-W01"},      // the Monday after
		{store.ResetWeekly, "2027-01-04T00:30:00+01:00", "2026-W53"}, // still Sunday in UTC
		{store.ResetWeekly, "2031-03-14T12:00:00Z", "2031-W11"},      // the suite's base time
		{store.ResetMonthly, "2026-12-01T00:00:00Z", "2026-12"},
		{store.ResetMonthly, "2026-12-31T23:59:59.999Z", "2026-12"},
		{store.ResetMonthly, "2027-01-01T00:00:00Z", "2027-01"},
		{store.ResetMonthly, "2027-01-01T00:30:00+01:00", "2026-12"}, // UTC
		{store.ResetMonthly, "2028-02-29T12:00:00Z", "2028-02"},      // a leap day
		{"", "2026-12-01T00:00:00Z", ""},                             // never resets
		{"hourly", "2026-12-01T00:00:00Z", ""},                       // unknown: as never
	} {
		if got := store.PeriodOf(tc.reset, date(tc.at)); got != tc.want {
			t.Errorf("PeriodOf(%q, %s) = %q, want %q", tc.reset, tc.at, got, tc.want)
		}
	}
}

func TestSecretSpentAndExpired(t *testing.T) {
	day := date("2026-12-01T12:00:00Z")
	k := store.Secret{Limit: 100, LimitReset: store.ResetDaily, Usage: 70, PeriodUsage: 30, Period: "2026-12-01"}
	if got := k.Spent(day); got != 30 {
		t.Errorf("Spent in the key's period = %d, want 30", got)
	}
	if got := k.Spent(day.Add(24 * time.Hour)); got != 0 {
		t.Errorf("Spent the next day = %d, want 0", got)
	}
	k.LimitReset = store.ResetWeekly // a period of another reset counts nothing
	if got := k.Spent(day); got != 0 {
		t.Errorf("Spent after the reset changed = %d, want 0", got)
	}
	never := store.Secret{PeriodUsage: 5}
	if got := never.Spent(day); got != 5 {
		t.Errorf("Spent of a key that never resets = %d, want 5", got)
	}

	if (store.Secret{}).Expired(day) {
		t.Error("a key without an expiry expired")
	}
	exp := store.Secret{ExpiresAt: day}
	if exp.Expired(day.Add(-time.Nanosecond)) || !exp.Expired(day) || !exp.Expired(day.Add(time.Hour)) {
		t.Error("a key expires at its ExpiresAt, not before")
	}
}

func TestSpendControls(t *testing.T) {
	for _, reset := range []string{"", store.ResetDaily, store.ResetWeekly, store.ResetMonthly} {
		if err := store.CheckSpendControls(10, reset); err != nil {
			t.Errorf("reset %q: %v", reset, err)
		}
	}
	if store.CheckSpendControls(-1, "") == nil || store.CheckSpendControls(0, "Daily") == nil {
		t.Error("a negative limit or an unknown reset passed")
	}

	in := store.Secret{Hash: "h", Name: "n", Limit: 5, LimitReset: store.ResetDaily, ExpiresAt: time.Unix(9, 0),
		Usage: 3, PeriodUsage: 2, Period: "p"}
	key, err := in.Fresh(true)
	if err != nil || key.Usage != 0 || key.PeriodUsage != 0 || key.Period != "" || key.Limit != 5 || key.Name != "n" {
		t.Errorf("Fresh API key %+v, %v: want usage cleared, controls kept", key, err)
	}
	tok, err := in.Fresh(false)
	if err != nil || tok.Limit != 0 || tok.LimitReset != "" || !tok.ExpiresAt.IsZero() || tok.Usage != 0 || tok.Name != "n" {
		t.Errorf("Fresh worker token %+v, %v: want name only", tok, err)
	}
	if _, err := (store.Secret{Limit: -1}).Fresh(true); err == nil {
		t.Error("Fresh with a negative limit: no error")
	}

	p := store.KeyPatch{Limit: new(int64(0)), ExpiresAt: new(time.Time{})}
	got := key
	p.Apply(&got)
	want := key
	want.Limit, want.ExpiresAt = 0, time.Time{}
	if got != want {
		t.Errorf("Apply: %+v, want %+v", got, want)
	}
	if (store.KeyPatch{}).Check() != nil || (store.KeyPatch{LimitReset: new("yearly")}).Check() == nil ||
		(store.KeyPatch{Limit: new(int64(-5))}).Check() == nil {
		t.Error("Check")
	}
}
