package watchstream

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestDependencies keeps watchstream what doc.go says: of fieldwatch it
// imports package change and internal/jsonscan only.
func TestDependencies(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"watcher/internal/watchstream", []string{module + "change", module + "internal/jsonscan"}, module)
}
