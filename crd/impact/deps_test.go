package impact

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestNoClientGo keeps package impact free of k8s.io/client-go, the watcher and
// fieldwatch's internal packages (doc.go).
func TestNoClientGo(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.Check(t, ".", module+"crd/impact", "k8s.io/client-go", module+"watcher", module+"internal")
}
