package history

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package history what doc.go says: it works on
// payload bytes, so it imports neither client-go nor the watcher, the
// rules, the actions or the app.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"internal/history",
		"k8s.io/client-go", module+"watcher", module+"rules", module+"action", module+"internal/app", module+"internal/testenv")
}
