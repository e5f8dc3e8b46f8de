package crdguard

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps the guard below the rules, the actions and the
// app that serve it (doc.go).
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"internal/crdguard",
		module+"rules", module+"action", module+"internal/app", module+"cmd", module+"internal/audit", module+"internal/history")
}
