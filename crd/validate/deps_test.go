package validate

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package validate free of fieldwatch's packages
// other than crd/diff and the leaves it uses (fileerr, internal/fieldpath;
// doc.go).
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"crd/validate", []string{module + "internal/fieldpath"},
		module+"watcher", module+"internal", module+"rules", module+"crd/impact")
}
