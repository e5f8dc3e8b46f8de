package rules

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClientGo keeps package rules, and the packages it shares its
// rules with, free of what they must not import (doc.go of each): rules
// and rules/cases stay testable with JSON fixtures alone (no client-go, no
// watcher, no actions); change, the vocabulary the watcher and the rules
// share, imports no Kubernetes module and no other fieldwatch package.
func TestNoClientGo(t *testing.T) {
	const module = "github.com/fieldwatch/fieldwatch/"
	noClient := []string{"k8s.io/client-go", module + "watcher", module + "rules/action", module + "internal/app"}
	tests := []struct {
		dir, pkg string
		banned   []string
	}{
		{".", module + "rules", noClient},
		{"./cases", module + "rules/cases", noClient},
		{"../change", module + "change", []string{"k8s.io/", "sigs.k8s.io/", module}},
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			out, err := exec.Command(goTool, "list", "-deps", tt.dir).Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			for _, dep := range strings.Fields(string(out)) {
				for _, banned := range tt.banned {
					if dep != tt.pkg && strings.HasPrefix(dep, banned) {
						t.Errorf("%s depends on %s", tt.pkg, dep)
					}
				}
			}
		})
	}
}
