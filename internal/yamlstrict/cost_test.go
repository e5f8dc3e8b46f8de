package yamlstrict

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/fileerr"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// Hostile documents: what one small file costs to decode must be bounded
// by its size, whatever its aliases and merge keys expand to.

// mergeBomb returns a document of levels mappings, each merging the one
// before it ten times (<<: [*m0, *m0, ...]): 10^levels merges for a file
// of about 70 bytes a level.
func mergeBomb(levels int) string {
	var b strings.Builder
	b.WriteString("any:\n  m0: &m0 {k: v}\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  m%d: &m%d {<<: [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*m%d", i-1)
		}
		b.WriteString("]}\n")
	}
	return b.String()
}

// pathBomb returns a document of levels mappings with two long keys each,
// both aliases of the level before: about 2^levels values, each at a field
// path of levels long keys (4.5 KB of file for 17 levels of 128-byte keys).
func pathBomb(levels, keyLen int) string {
	k0, k1 := strings.Repeat("a", keyLen), strings.Repeat("b", keyLen)
	var b strings.Builder
	fmt.Fprintf(&b, "any:\n  l0: &l0 {%s: 1, %s: 2}\n", k0, k1)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d {%s: *l%d, %s: *l%d}\n", i, i, k0, i-1, k1, i-1)
	}
	return b.String()
}

// benchmarkDecode reports, besides time and allocations, the heap that
// one decoded document keeps (its values and Positions): retained-B.
func benchmarkDecode(b *testing.B, src string) {
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var d doc
	pos, _ := Unmarshal([]byte(src), &d)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(pos)
	for b.Loop() {
		var d doc
		_, _ = Unmarshal([]byte(src), &d)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "retained-B")
	b.ReportMetric(float64(len(src)), "file-B")
}

// BenchmarkMergeBomb decodes merge-key bombs of several levels.
func BenchmarkMergeBomb(b *testing.B) {
	for _, levels := range []int{6, 8, 10} {
		b.Run(fmt.Sprintf("levels=%d", levels), func(b *testing.B) { benchmarkDecode(b, mergeBomb(levels)) })
	}
}

// BenchmarkPathBomb decodes documents whose aliases expand to long field
// paths.
func BenchmarkPathBomb(b *testing.B) {
	for _, levels := range []int{13, 15, 17} {
		b.Run(fmt.Sprintf("levels=%d", levels), func(b *testing.B) { benchmarkDecode(b, pathBomb(levels, 128)) })
	}
}

// TestHostileDocumentsAreBounded decodes bombs under a deadline and an
// allocation budget. Before merge keys counted towards MaxNodes, the
// 10-level merge bomb (694 bytes) would have taken hours (8 levels: 26 s,
// 10 GB allocated); before positions were kept only outside aliases and
// path bytes were budgeted, the 4.5 KB path bomb kept 395 MB.
func TestHostileDocumentsAreBounded(t *testing.T) {
	tests := []struct{ name, src string }{
		{"merge bomb, 10 levels", mergeBomb(10)},
		{"path bomb, 17 levels of 128-byte keys", pathBomb(17, 128)},
		{"path bomb, 40 levels of 1,000-byte keys", pathBomb(40, 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			var d doc
			var pos *Positions
			var errs fileerr.List
			cpu := testenv.SpentCPU(t, func() { pos, errs = Unmarshal([]byte(tt.src), &d) })
			runtime.ReadMemStats(&after)
			if len(errs) == 0 || !strings.Contains(errs[0].Msg, "too many values") {
				t.Errorf("errors = %v, want too many values", errs)
			}
			if cpu > 10*time.Second {
				t.Errorf("decoding took %v of CPU, want well under 10s", cpu)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 100<<20 {
				t.Errorf("decoding allocated %d bytes, want at most 100 MiB", alloc)
			}
			if n := len(pos.nodes); n > len(tt.src) {
				t.Errorf("%d positions kept for a file of %d bytes", n, len(tt.src))
			}
		})
	}
}

func TestSizeLimits(t *testing.T) {
	var d doc
	_, errs := Unmarshal([]byte("s: "+strings.Repeat("x", MaxBytes)), &d)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "1:1: the file is") {
		t.Errorf("errors = %v, want one about the file's size", errs)
	}
	_, errs = Unmarshal([]byte("any:\n  ? "+strings.Repeat("k", MaxKeyBytes+1)+"\n  : 1\n"), &d)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "2:5: any: key \"kkkk") || !strings.Contains(errs[0].Error(), "is longer than 1024 bytes") {
		t.Errorf("errors = %v, want one about the key's length", errs)
	}
}

// TestPositionsOfAliases: the place an alias or merge key is used has a
// position (that of the value it stands for); what it expands to there
// does not, and is placed at the alias's value.
func TestPositionsOfAliases(t *testing.T) {
	var d doc
	pos, errs := Unmarshal([]byte("inner: &i {name: a}\nany:\n  x: *i\n  y: {<<: *i}\n"), &d)
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for path, want := range map[string]bool{"inner.name": true, "any.x": true, "any.x.name": false, "any.y": true, "any.y.name": true, "any.y.name.z": false} {
		if pos.Has(path) != want {
			t.Errorf("Has(%q) = %v, want %v", path, !want, want)
		}
	}
	if line, col := pos.At("any.x.name"); line != 1 || col != 8 {
		t.Errorf("At(any.x.name) = %d:%d, want the anchored value at 1:8", line, col)
	}
}
