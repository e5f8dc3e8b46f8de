package action

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package action what doc.go says: it runs the
// specs of package rules and never imports the watcher (the command wires
// the two together), the command's wiring, nor the test control plane.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"action", module+"watcher", module+"internal/app", module+"internal/testenv")
}
