package api

import (
	"testing"
)

func TestUSDIsExact(t *testing.T) {
	for credits, want := range map[int64]string{0: "0.00", 1: "0.01", 10: "0.10", 1234: "12.34", 100000: "1000.00", -5: "-0.05"} {
		if got := usd(credits); got != want {
			t.Errorf("usd(%d) = %q, want %q", credits, got, want)
		}
	}
}

func TestNewRefusesMissingDependencies(t *testing.T) {
	if _, err := New(Config{Limits: DefaultLimits()}); err == nil {
		t.Fatal("New accepted a config without its dependencies")
	}
}
