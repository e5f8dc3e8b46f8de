package audit

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package audit what doc.go says: it works on plain
// values and package change, so it imports neither the watcher, nor the
// rules and their actions, nor the app, nor client-go.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"internal/audit",
		"k8s.io/client-go", module+"watcher", module+"rules", module+"internal/app", module+"internal/testenv")
}
