package rules

import (
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
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
	testenv.SkipShort(t, testenv.LoadTest)
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
			var err error
			cpu := testenv.SpentCPU(t, func() { _, err = x.eval(vars) })
			runtime.ReadMemStats(&after)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
				t.Errorf("allocated %d bytes (error %v), want at most 40 MiB", alloc, err)
			}
			if cpu > 10*time.Second {
				t.Errorf("took %v of CPU", cpu)
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

// evalWithin evaluates x on c and fails the test if that takes longer
// than a deadline that the bounded evaluation meets by far: the
// unbounded evaluations this guards against take minutes.
func evalWithin(t *testing.T, x *celExpr, c *Change) (bool, error) {
	t.Helper()
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	go func() {
		ok, err := x.eval(newCELVars(c))
		done <- result{ok, err}
	}()
	select {
	case r := <-done:
		return r.ok, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still evaluating after 30s", x.src)
		return false, nil
	}
}

// slowPattern (71 bytes) compiles to 10,003 instructions: RE2 takes
// about 3 minutes to match it against 1 MiB of a.
var slowPattern = strings.Repeat("a{1000}", 10) + "b"

// TestCELMatchesCost: a regex match is charged its pattern's compiled size
// times the string's length, and one that would cost more than CostLimit
// is refused before it runs, whether its pattern is a constant or comes
// from the object, and however the calls add up. Before, one match of
// slowPattern against 1 MiB ran for minutes without an error.
func TestCELMatchesCost(t *testing.T) {
	big := celBombChange(1 << 20)
	big.New["spec"].(map[string]any)["p"] = slowPattern
	small := celBombChange(10 << 10)
	tests := []struct {
		name, expr string
		c          *Change
	}{
		{"constant pattern", "object.spec.s.matches('" + slowPattern + "')", big},
		{"constant pattern, global form", "matches(object.spec.s, '" + slowPattern + "')", big},
		{"pattern from the object", "object.spec.s.matches(object.spec.p)", big},
		{"short pattern, large program", "object.spec.s.matches('a{1000}b')", big},
		// 10 KiB against ^ba{1000} costs 1,025 * 251 units (the match
		// fails at the first byte, but the price is the worst case):
		// the fourth call exceeds the limit. Charged by the pattern's
		// length, 100 calls cost 307,500 units.
		{"calls in a loop", "lists.range(100).exists(i, object.spec.s.matches('^ba{1000}'))", small},
		{"calls in a loop, pattern from the object", "lists.range(100).exists(i, object.spec.s.matches('^b' + 'a{1000}'))", small},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, issues := compileCEL(tt.expr, false)
			if issues != nil {
				t.Fatal(issues)
			}
			ok, err := evalWithin(t, x, tt.c)
			if err == nil || !strings.Contains(err.Error(), "cost limit exceeded") {
				t.Errorf("eval = %v, %v; want the cost limit exceeded", ok, err)
			}
		})
	}
	x, _ := compileCEL("object.spec.s.matches(object.spec.p)", false)
	_, err := evalWithin(t, x, big)
	if want := "cost limit exceeded: matches would cost 262249858 units (a pattern of 10003 instructions against 1048576 bytes), more than the limit of 1000000"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
}

// TestCELMatches: matches gives cel-go's results, with constant patterns
// and patterns from the object, and charges what regexCost says.
func TestCELMatches(t *testing.T) {
	obj := map[string]any{"metadata": map[string]any{"name": "web-1"}, "spec": map[string]any{"p": "^web-[0-9]+$", "bad": "a(", "n": int64(1)}}
	tests := []struct {
		expr    string
		want    bool
		wantErr string
	}{
		{"object.metadata.name.matches('^web-')", true, ""},
		{"object.metadata.name.matches('^db-')", false, ""},
		{"matches(object.metadata.name, '[0-9]$')", true, ""},
		{"object.metadata.name.matches(object.spec.p)", true, ""},
		{"matches(object.metadata.name, object.spec.p + 'x')", false, ""},
		{"''.matches('')", true, ""},
		{"object.metadata.name.matches(object.spec.bad)", false, "error parsing regexp"},
		{"object.spec.n.matches('1')", false, "no such overload"},
		{"object.metadata.name.matches(object.spec.n)", false, "no such overload"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			x, issues := compileCEL(tt.expr, false)
			if issues != nil {
				t.Fatal(issues)
			}
			got, err := x.eval(newCELVars(&Change{Type: change.Created, New: obj}))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("eval = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("eval = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if _, issues := compileCEL("'a'.matches('a(')", false); issues == nil || !strings.Contains(issues[0].msg, "error parsing regexp") {
		t.Errorf("a constant pattern that does not compile: %v", issues)
	}
	// The cost: 40 bytes against ^web-[0-9]+$ (regexInsts) beyond a
	// baseline without the match.
	long := map[string]any{"metadata": map[string]any{"name": strings.Repeat("w", 40)}, "spec": obj["spec"]}
	cost := func(expr string) uint64 {
		x, issues := compileCEL(expr, false)
		if issues != nil || !x.metered {
			t.Fatalf("%s: %v, metered %v", expr, issues, x != nil && x.metered)
		}
		_, det, err := x.prg.Eval(newCELVars(&Change{Type: change.Created, New: long}))
		if err != nil {
			t.Fatal(err)
		}
		return *det.ActualCost()
	}
	want := regexCost(regexInsts("^web-[0-9]+$"), 40)
	// The loop turns metering on for the baseline.
	for _, expr := range []string{"object.metadata.name.matches('^web-[0-9]+$')", "object.metadata.name.matches(object.spec.p)"} {
		if d := cost("[1].all(i, i > 0) && "+expr) - cost("[1].all(i, i > 0) && object.metadata.name.startsWith('w')"); d+1 < want || d > want+2 {
			t.Errorf("%s costs %d beyond the baseline, want about %d", expr, d, want)
		}
	}
}

// TestCELLoopsStopAtTheTimeLimit: a loop is stopped at MaxEvalTime
// whatever its cost says. Each iteration here compares a 50,000-key
// map (charged as the one key of the map that holds it), so the loop
// runs for seconds within the cost limit.
func TestCELLoopsStopAtTheTimeLimit(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	inner := map[string]any{}
	for i := range 50_000 {
		inner[fmt.Sprintf("k%d", i)] = int64(i)
	}
	l := make([]any, 10_000)
	for i := range l {
		l[i] = int64(i)
	}
	obj := map[string]any{"spec": map[string]any{"m": map[string]any{"a": inner}, "l": l}}
	old := map[string]any{"spec": map[string]any{"m": map[string]any{"a": maps.Clone(inner)}}}
	x, issues := compileCEL("object.spec.l.all(i, object.spec.m == oldObject.spec.m)", false)
	if issues != nil {
		t.Fatal(issues)
	}
	ok, err := evalWithin(t, x, &Change{Type: change.Updated, New: obj, Old: old})
	if !errors.Is(err, errTimeLimit) {
		t.Errorf("eval = %v, %v; want the time limit exceeded", ok, err)
	}
}

// TestCELLongLoopsAreBounded: cel-go's cost tracking takes time that
// grows with the square of a loop's iterations (10 s for 64,000, within
// the cost limit); a loop over a long list is stopped, by the time limit
// or the cost limit, long before. So is a loop testing membership in a
// long list, charged one unit per item (it was charged one).
func TestCELLongLoopsAreBounded(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	long := make([]any, 400_000)
	for i := range long {
		long[i] = int64(i)
	}
	for _, tt := range []struct{ name, expr string }{
		{"long list", "object.spec.l.all(x, x >= 0)"},
		{"membership", "object.spec.l.all(x, x in object.spec.l)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			x, issues := compileCEL(tt.expr, false)
			if issues != nil {
				t.Fatal(issues)
			}
			ok, err := evalWithin(t, x, &Change{Type: change.Created, New: map[string]any{"spec": map[string]any{"l": long}}})
			if !errors.Is(err, errTimeLimit) && !errors.Is(err, errCostLimit) {
				t.Errorf("eval = %v, %v; want the time or cost limit exceeded", ok, err)
			}
		})
	}
	l := make([]any, 2000)
	for i := range l {
		l[i] = int64(i)
	}
	x, _ := compileCEL("object.spec.l.all(x, x in object.spec.l)", false)
	if ok, err := evalWithin(t, x, &Change{Type: change.Created, New: map[string]any{"spec": map[string]any{"l": l}}}); !errors.Is(err, errCostLimit) {
		t.Errorf("2,000 membership tests in 2,000 items = %v, %v; want the cost limit exceeded", ok, err)
	}
}

// TestCELSearchIsLinear: indexOf and lastIndexOf give the strings
// extension's results (compared with it on ASCII, multi-byte and invalid
// UTF-8 strings, every offset) in time linear in the string: before,
// searching 1 MiB for 512 KiB that is not there ran for minutes.
func TestCELSearchIsLinear(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("s", cel.StringType), cel.Variable("sub", cel.StringType), cel.Variable("off", cel.IntType), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	strs := []string{"", "a", "ab", "abab", "aaa", "héllo wörld", "日本語日本", "a\xffb\xff", "\xff\xfe", "\uFFFDb", "xabcabcx"}
	subs := []string{"", "a", "b", "ab", "ba", "l", "ö", "本", "日本", "\xff", "\uFFFD", "\uFFFDb", "abc", "zz", "héllo wörld!"}
	for _, expr := range []string{"s.indexOf(sub)", "s.lastIndexOf(sub)", "s.indexOf(sub, off)", "s.lastIndexOf(sub, off)"} {
		ours, issues := compileCEL(strings.NewReplacer("s.", "object.s.", "(sub", "(object.sub", "off)", "object.off)").Replace(expr)+" == object.want", false)
		if issues != nil {
			t.Fatal(issues)
		}
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatal(iss.Err())
		}
		theirs, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range strs {
			for _, sub := range subs {
				for off := int64(-1); off <= int64(len(s))+1; off++ {
					want, _, wantErr := theirs.Eval(map[string]any{"s": s, "sub": sub, "off": off})
					obj := map[string]any{"s": s, "sub": sub, "off": off, "want": want}
					got, err := ours.eval(newCELVars(&Change{Type: change.Created, New: obj}))
					if (err != nil) != (wantErr != nil) || (err == nil && !got) {
						t.Errorf("%s with s=%q sub=%q off=%d: ours %v, %v; the extension's %v, %v", expr, s, sub, off, got, err, want, wantErr)
					}
				}
			}
		}
	}
	s, sub := strings.Repeat("a", 1<<20), strings.Repeat("a", 512<<10)+"b"
	for _, expr := range []string{"object.s.indexOf(object.sub) == -1", "object.s.lastIndexOf(object.sub) == -1"} {
		x, issues := compileCEL(expr, false)
		if issues != nil {
			t.Fatal(issues)
		}
		if ok, err := evalWithin(t, x, &Change{Type: change.Created, New: map[string]any{"s": s, "sub": sub}}); !ok || err != nil {
			t.Errorf("%s = %v, %v", expr, ok, err)
		}
	}
}

// BenchmarkCELMatches matches a{1000}b (1,003 instructions) against
// strings of a, which keeps every instruction busy at every byte (RE2's
// worst case), within the cost limit: ns/inst-byte is what one unit of
// regexCost stands for, times 40.
func BenchmarkCELMatches(b *testing.B) {
	for _, n := range []int{1 << 10, 4 << 10} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			x, issues := compileCEL("object.spec.s.matches('a{1000}b')", false)
			if issues != nil {
				b.Fatal(issues)
			}
			vars := newCELVars(celBombChange(n))
			for b.Loop() {
				if _, err := x.eval(vars); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n*regexInsts("a{1000}b")), "ns/inst-byte")
		})
	}
}

// BenchmarkCELLongLoop evaluates a loop over n items: cel-go's cost
// tracking makes the time per item grow with n (MaxEvalTime bounds it).
func BenchmarkCELLongLoop(b *testing.B) {
	for _, n := range []int{1000, 2000, 4000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			l := make([]any, n)
			for i := range l {
				l[i] = int64(i)
			}
			x, issues := compileCEL("object.spec.l.all(x, x >= 0)", false)
			if issues != nil {
				b.Fatal(issues)
			}
			vars := newCELVars(&Change{Type: change.Created, New: map[string]any{"spec": map[string]any{"l": l}}})
			for b.Loop() {
				if _, err := x.eval(vars); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/item")
		})
	}
}
