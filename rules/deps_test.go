package rules

import (
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/depcheck"
)

// TestNoClientGo keeps package rules, and the packages it shares its
// rules with, free of what they must not import (doc.go of each): rules
// and internal/cases stay testable with JSON fixtures alone (no client-go, no
// watcher, no actions); change, the vocabulary the watcher and the rules
// share, imports no Kubernetes module and no other fieldwatch package.
func TestNoClientGo(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	noClient := []string{"k8s.io/client-go", module + "watcher", module + "action", module + "internal/app"}
	tests := []struct {
		dir, pkg string
		banned   []string
	}{
		{".", module + "rules", noClient},
		{"../internal/cases", module + "internal/cases", noClient},
		{"../change", module + "change", []string{"k8s.io/", "sigs.k8s.io/", module}},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			depcheck.Check(t, tt.dir, tt.pkg, tt.banned...)
		})
	}
}
