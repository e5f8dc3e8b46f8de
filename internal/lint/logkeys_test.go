package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// logCalls are the calls whose string literal arguments this test reads
// as keys: slog.Group's. golangci-lint's sloglint (.golangci.yml,
// forbidden-keys) finds "err" among the keys of log calls and of the
// attributes passed to them, but not among a group's own key-value
// arguments.
var logCalls = map[string]bool{"Group": true}

// TestLogErrorKey fails for every slog.Group of the tree that puts an
// error under the key "err": the key is "error", as sloglint holds it to
// be everywhere else.
func TestLogErrorKey(t *testing.T) {
	bad := logErrKeys(t, "../..")
	for _, b := range bad {
		t.Errorf(`%s: log key "err" in a group: use "error"`, b)
	}
}

// TestLogErrorKeyFinds checks that the check finds the key where it is,
// and only there.
func TestLogErrorKeyFinds(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\nimport \"log/slog\"\n\nfunc f(l *slog.Logger, err error) {\n\tl.Error(\"failed\", slog.Group(\"g\", \"error\", err))\n\tl.Warn(\"failed\", slog.Group(\"g\", \"err\", err))\n\t_ = slog.Any(\"err\", err)\n\t_ = \"err\"\n}\n"
	if err := writeFile(filepath.Join(dir, "p.go"), src); err != nil {
		t.Fatal(err)
	}
	bad := logErrKeys(t, dir)
	if len(bad) != 1 || !strings.HasSuffix(bad[0], "p.go:7") {
		t.Errorf("found %q, want p.go:7", bad)
	}
}

// logErrKeys returns FILE:LINE of every "err" argument of a call of
// logCalls in the Go files under root (testdata and hidden directories
// left out).
func logErrKeys(t *testing.T, root string) []string {
	t.Helper()
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !logCalls[sel.Sel.Name] {
				return true
			}
			for _, arg := range call.Args {
				if lit, ok := arg.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && s == "err" {
						p := fset.Position(lit.Pos())
						bad = append(bad, p.Filename+":"+strconv.Itoa(p.Line))
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o644) }
