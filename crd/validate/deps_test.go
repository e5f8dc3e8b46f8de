package validate

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package validate free of fieldwatch's packages
// other than crd/diff (doc.go).
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"crd/validate", module+"watcher", module+"internal", module+"rules", module+"crd/impact")
}
