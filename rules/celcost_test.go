package rules

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// celBombs build strings or lists from a large value: each must be
// stopped (or cost) in proportion to the value, whatever it builds.
var celBombs = []struct{ name, expr string }{
	{"concatenation", strings.Repeat("object.spec.s + ", 31) + "object.spec.s != ''"},
	{"concatenation in a loop", "object.spec.l.map(i, object.spec.s + object.spec.s).size() > 0"},
	{"replace", "object.spec.s.replace('', object.spec.s) != ''"},
	{"replace in a loop", "object.spec.l.map(i, object.spec.s.replace('a', 'aaaa')).size() > 0"},
	{"join", "object.spec.l.map(i, object.spec.s).join('') != ''"},
	{"format", "'%s%s%s%s'.format([object.spec.s, object.spec.s, object.spec.s, object.spec.s]) != ''"},
	{"list concatenation", "(object.spec.l + object.spec.l + object.spec.l).size() > 0"},
	{"split", "object.spec.s.split('').size() > 0"},
}

// celBombChange carries a 1 MiB string of 'a' and a list of 1,000 items.
func celBombChange(size int) *Change {
	l := make([]any, 1000)
	for i := range l {
		l[i] = int64(i)
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "x", "namespace": "ns"},
		"spec": map[string]any{"s": strings.Repeat("a", size), "l": l}}
	return &Change{Type: change.Created, Resource: change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap"}, New: obj}
}

func BenchmarkCELBombs(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		c := celBombChange(size)
		for _, bomb := range celBombs {
			b.Run(fmt.Sprintf("%s/value=%d", bomb.name, size), func(b *testing.B) {
				x, issues := compileCEL(bomb.expr, false)
				if issues != nil {
					b.Fatal(issues)
				}
				vars := newCELVars(c)
				b.ReportAllocs()
				for b.Loop() {
					_, _ = x.eval(vars)
				}
			})
		}
	}
}

// TestCELBombsAreBounded evaluates each bomb on a 1 MiB value: it is
// stopped, or finishes, within an allocation budget a hundred times below
// what it took unbounded (concatenation 553 MB, concatenation in a loop
// 2.1 GB, join 5.3 GB, replace out of memory at a terabyte).
func TestCELBombsAreBounded(t *testing.T) {
	c := celBombChange(1 << 20)
	vars := newCELVars(c)
	for _, bomb := range celBombs {
		t.Run(bomb.name, func(t *testing.T) {
			x, issues := compileCEL(bomb.expr, false)
			if issues != nil {
				t.Fatal(issues)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err := x.eval(vars)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
				t.Errorf("allocated %d bytes (error %v), want at most 40 MiB", alloc, err)
			}
			if elapsed > 10*time.Second {
				t.Errorf("took %v", elapsed)
			}
		})
	}
}

// TestCELBoundedFunctions: replace and join, redefined with a bound, give
// the strings extension's results.
func TestCELBoundedFunctions(t *testing.T) {
	for _, expr := range []string{
		"'abc'.replace('b', 'xx') == 'axxc'",
		"'aaa'.replace('a', 'b', 2) == 'bba'",
		"'aaa'.replace('a', 'b', -1) == 'bbb'",
		"'aaa'.replace('a', 'b', 0) == 'aaa'",
		"'ab'.replace('', '-') == '-a-b-'",
		"'aaaa'.replace('aa', '') == ''",
		"['a', 'b'].join('-') == 'a-b'",
		"['a', 'b'].join() == 'ab'",
		"[].join(',') == ''",
		"object.spec.l.map(i, 'x').join() == 'xxx'",
	} {
		x, issues := compileCEL(expr, false)
		if issues != nil {
			t.Fatalf("%s: %v", expr, issues)
		}
		ok, err := x.eval(newCELVars(&Change{Type: change.Created, New: map[string]any{"spec": map[string]any{"l": []any{1, 2, 3}}}}))
		if !ok || err != nil {
			t.Errorf("%s = %v, %v", expr, ok, err)
		}
	}
	x, _ := compileCEL("object.spec.s.replace('a', object.spec.s) != ''", false)
	if _, err := x.eval(newCELVars(celBombChange(64 << 10))); err == nil || !strings.Contains(err.Error(), "replace would build a string of more than 10485760 bytes") {
		t.Errorf("replace of 64 KiB into each of 64 Ki places: %v", err)
	}
}
