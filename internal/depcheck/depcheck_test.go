package depcheck

import "testing"

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

const self = "github.com/fieldwatch/fieldwatch/internal/depcheck"

func TestCheck(t *testing.T) {
	tests := []struct {
		name    string
		allowed []string
		banned  []string
		fails   bool
	}{
		{"a banned prefix among the deps", nil, []string{"os/"}, true},
		{"the package itself is not a dependency", nil, []string{self}, false},
		{"nothing banned", nil, []string{"k8s.io/"}, false},
		{"an allowed package under a banned prefix", []string{"os/exec"}, []string{"os/"}, false},
		{"allowed is exact, not a prefix", []string{"os"}, []string{"os/"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckExcept(r, ".", self, tt.allowed, tt.banned...)
			if got := len(r.errors) > 0; got != tt.fails {
				t.Errorf("failed = %v, want %v (%v)", got, tt.fails, r.errors)
			}
		})
	}
}

func TestStdlibOnly(t *testing.T) {
	r := &recorder{TB: t}
	StdlibOnly(r, ".", self)
	if len(r.errors) > 0 {
		t.Errorf("depcheck imports only the standard library, yet: %v", r.errors)
	}
	r = &recorder{TB: t}
	StdlibOnly(r, "../yamlstrict", "github.com/fieldwatch/fieldwatch/internal/yamlstrict")
	if len(r.errors) == 0 {
		t.Error("yamlstrict depends on gopkg.in/yaml.v3, yet StdlibOnly passed it")
	}
}
