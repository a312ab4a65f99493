// Package testenv decides what a test does when an external component it
// needs (Ollama, DynamoDB Local, Node) is missing: skip with a one-line
// reason on a bare machine, fail when C0MPUTE_REQUIRE_INTEGRATION=1, which
// scripts/test sets after installing and starting every component.
package testenv

import (
	"os"
	"testing"
)

// RequireIntegration is the variable that turns skips into failures.
const RequireIntegration = "C0MPUTE_REQUIRE_INTEGRATION"

// Required reports whether missing components are failures.
func Required() bool { return os.Getenv(RequireIntegration) == "1" }

// Missing ends the test because a component is absent: a skip, or a
// failure when integration is required.
func Missing(t testing.TB, component, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s is required (%s=1) but unavailable: %s", component, RequireIntegration, reason)
	}
	t.Skipf("%s unavailable: %s (scripts/test installs it)", component, reason)
}
