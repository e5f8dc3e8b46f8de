package depcheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Check fails t for every package that the package in dir (pkg, its
// import path, which is not checked against itself) depends on and whose
// import path starts with one of banned.
func Check(t testing.TB, dir, pkg string, banned ...string) {
	t.Helper()
	CheckExcept(t, dir, pkg, nil, banned...)
}

// CheckExcept is Check for a package that may depend on some packages
// under a banned prefix: a dependency whose import path is one of allowed
// passes.
func CheckExcept(t testing.TB, dir, pkg string, allowed []string, banned ...string) {
	t.Helper()
	for _, dep := range deps(t, dir) {
		if dep == pkg || slices.Contains(allowed, dep) {
			continue
		}
		for _, b := range banned {
			if strings.HasPrefix(dep, b) {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

// StdlibOnly fails t for every package outside the standard library (an
// import path whose first element has a dot) that the package in dir
// depends on.
func StdlibOnly(t testing.TB, dir, pkg string) {
	t.Helper()
	for _, dep := range deps(t, dir) {
		if first, _, _ := strings.Cut(dep, "/"); dep != pkg && strings.Contains(first, ".") {
			t.Errorf("%s depends on %s, outside the standard library", pkg, dep)
		}
	}
}

// deps returns the import paths `go list -deps` names for the package in
// dir.
func deps(t testing.TB, dir string) []string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not in PATH: %v", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", dir).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", dir, err)
	}
	return strings.Fields(string(out))
}
