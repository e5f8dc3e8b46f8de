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

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		banned []string
		fails  bool
	}{
		{"a banned prefix among the deps", []string{"os/"}, true},
		{"the package itself is not a dependency", []string{"github.com/fieldwatch/fieldwatch/internal/depcheck"}, false},
		{"nothing banned", []string{"k8s.io/"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			Check(r, ".", "github.com/fieldwatch/fieldwatch/internal/depcheck", tt.banned...)
			if got := len(r.errors) > 0; got != tt.fails {
				t.Errorf("failed = %v, want %v (%v)", got, tt.fails, r.errors)
			}
		})
	}
}
