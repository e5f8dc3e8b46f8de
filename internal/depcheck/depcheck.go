package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// Check fails t for every package that the package in dir (pkg, its
// import path, which is not checked against itself) depends on and whose
// import path starts with one of banned.
func Check(t testing.TB, dir, pkg string, banned ...string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", dir).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", dir, err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == pkg {
			continue
		}
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
