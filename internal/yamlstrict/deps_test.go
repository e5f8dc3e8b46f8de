package yamlstrict

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps package yamlstrict free of fieldwatch but for
// the path syntax its error paths are written in and the error type it
// reports (doc.go).
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"internal/yamlstrict", []string{module + "internal/fieldpath", module + "fileerr"}, module)
}
