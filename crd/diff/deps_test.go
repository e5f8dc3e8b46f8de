package diff

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package diff to the API types (doc.go): no client-go,
// no apiserver code, nothing of fieldwatch's own.
func TestDependencies(t *testing.T) {
	depcheck.Check(t, ".", "github.com/fieldwatch/fieldwatch/crd/diff",
		"k8s.io/client-go", "k8s.io/apiserver", "k8s.io/apiextensions-apiserver/pkg/apiserver", "github.com/fieldwatch/fieldwatch/")
}
