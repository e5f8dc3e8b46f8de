package testenv

import (
	"flag"
	"fmt"
	"testing"
)

// The reasons tests give for leaving the unit tier (`go test -short`,
// `make unit`): each names the tier the test belongs to and what it needs.
const (
	NeedsControlPlane = "integration: needs a control plane"
	NeedsPostgres     = "integration: needs PostgreSQL"
	NeedsProcesses    = "integration: runs fieldwatch processes"
	NeedsBrowser      = "integration: needs Chromium"
	NeedsAlertmanager = "integration: needs Alertmanager"
	NeedsRoot         = "integration: needs root"
	LoadTest          = "integration: a load or resource-bound test, seconds of CPU"
)

// SkipShort skips t under `go test -short`, the unit tier, saying why
// (one of the reasons above, or a line of the same form: the tier, a
// colon, what the test needs). Shared, Start and StartPostgres call it,
// so a test that needs them skips without calling it itself.
func SkipShort(t testing.TB, reason string) {
	t.Helper()
	if testing.Short() {
		t.Skip(reason)
	}
}

// refuseShort returns an error under `go test -short`: what starts a
// server for the integration tier (New, NewPostgres) refuses to in the
// unit tier, where the test should have skipped itself.
func refuseShort(reason string) error {
	if testing.Testing() && flag.Parsed() && testing.Short() {
		return fmt.Errorf("go test -short (the unit tier) starts no servers: the test must skip itself first with testenv.SkipShort(t, %q)", reason)
	}
	return nil
}
