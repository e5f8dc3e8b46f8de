package payload

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package payload what doc.go says: nothing of
// Kubernetes, and of fieldwatch package change only, so that a receiver
// importing it pulls in no client-go.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"payload", []string{module + "change"},
		"k8s.io/", "sigs.k8s.io/", module)
}
