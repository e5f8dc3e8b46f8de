package impact

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestNoClientGo keeps package impact free of k8s.io/client-go, the watcher and
// fieldwatch's internal packages but the path syntax (doc.go).
func TestNoClientGo(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	depcheck.CheckExcept(t, ".", module+"crd/impact", []string{module + "internal/fieldpath"},
		"k8s.io/client-go", module+"watcher", module+"internal")
}
