package crddiff

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps crddiff to the API types (doc.go): no client-go,
// no apiserver code, nothing of fieldwatch's own.
func TestDependencies(t *testing.T) {
	depcheck.Check(t, ".", "github.com/fieldwatch/fieldwatch/rules/crddiff",
		"k8s.io/client-go", "k8s.io/apiserver", "k8s.io/apiextensions-apiserver/pkg/apiserver", "github.com/fieldwatch/fieldwatch/")
}
