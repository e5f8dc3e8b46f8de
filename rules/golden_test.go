package rules_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/rules"
)

// caseTime is the time of the golden cases that give none.
var caseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// loadGolden loads testdata/golden/rules.yaml and its cases.
func loadGolden(t *testing.T) (*rules.Set, []cases.Case) {
	t.Helper()
	set, err := rules.Load("testdata/golden/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cases.Load("testdata/golden/cases.yaml", caseTime)
	if err != nil {
		t.Fatal(err)
	}
	return set, cs
}

// TestGolden evaluates the cases of testdata/golden/cases.yaml against
// testdata/golden/rules.yaml: each must meet its expectations, and the
// payloads must equal testdata/golden/<case>.json byte for byte (key order
// included).
func TestGolden(t *testing.T) {
	set, cs := loadGolden(t)
	for i, res := range cases.Run(set, cs) {
		t.Run(res.Name, func(t *testing.T) {
			if !res.Pass {
				t.Errorf("expectations failed:\n%s", res.Diff)
			}
			got := goldenJSON(t, res)
			file := filepath.Join("testdata/golden", slug(cs[i].Name)+".json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("payloads differ from %s (run with -update to accept):\n%s", file, cases.LineDiff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")))
			}
		})
	}
}

// goldenJSON renders a result's payloads (indented, keys in payload order)
// and errors.
func goldenJSON(t *testing.T, res cases.Result) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString(`{"firings":[`)
	for i, f := range res.Firings {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(f)
	}
	b.WriteString(`],"errors":`)
	errs, _ := json.Marshal(append([]string{}, res.Errors...))
	b.Write(errs)
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		t.Fatalf("payloads are not JSON: %v\n%s", err, b.Bytes())
	}
	out.WriteByte('\n')
	return out.Bytes()
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(s))
}

// TestEvalConcurrentNoMutation evaluates the same change from many
// goroutines (run with -race) and checks that the input objects are not
// changed, redaction included.
func TestEvalConcurrentNoMutation(t *testing.T) {
	set, cs := loadGolden(t)
	snapshots := make([]string, len(cs))
	for i, c := range cs {
		b, _ := json.Marshal([]any{c.Change.Old, c.Change.New})
		snapshots[i] = string(b)
	}
	want := make([][]rules.Firing, len(cs))
	for i := range cs {
		want[i], _ = set.Eval(&cs[i].Change)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8*len(cs))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range len(cs) {
				i := (n + g) % len(cs)
				got, _ := set.Eval(&cs[i].Change)
				if len(got) != len(want[i]) {
					errc <- fmt.Errorf("case %s: %d firings, want %d", cs[i].Name, len(got), len(want[i]))
					continue
				}
				for j := range got {
					if !bytes.Equal(got[j].Payload, want[i][j].Payload) {
						errc <- fmt.Errorf("case %s: payload %d differs between runs", cs[i].Name, j)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for i, c := range cs {
		b, _ := json.Marshal([]any{c.Change.Old, c.Change.New})
		if string(b) != snapshots[i] {
			t.Errorf("case %s: Eval changed the input objects", c.Name)
		}
	}
}
