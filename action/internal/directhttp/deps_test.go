package directhttp

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps directhttp what doc.go says: nothing of
// fieldwatch and nothing of Kubernetes.
func TestDependencies(t *testing.T) {
	const self = "github.com/fieldwatch/fieldwatch/action/internal/directhttp"
	depcheck.Check(t, ".", self, "github.com/fieldwatch/", "k8s.io/")
}
