package web

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// shortenReference is shorten as json.Compact and a cut of the whole
// value would have it.
func shortenReference(v []byte, n int) (string, bool) {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return "", false
	}
	s := b.String()
	if len(s) <= n {
		return s, false
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…", true
}

func TestShorten(t *testing.T) {
	for _, v := range []string{`1`, `"a b"`, `{ "a" : [1, 2,  3] }`, "{\n  \"k\": \"v\\\" x\",\n  \"l\": [ ]\n}", `"ééééééééé"`,
		`"` + strings.Repeat("x", 200) + `"`, `[` + strings.Repeat(`"\\ \"", `, 30) + `1]`, ` "trailing" `} {
		for _, n := range []int{0, 1, 5, 13, 80, 1000} {
			want, wantCut := shortenReference([]byte(v), n)
			if got, cut := shorten([]byte(v), n); got != want || cut != wantCut {
				t.Errorf("shorten(%q, %d) = %q, %v; want %q, %v", v, n, got, cut, want, wantCut)
			}
		}
	}
}

// FuzzShorten: shorten of valid JSON is what compacting the whole value
// and cutting it gives.
func FuzzShorten(f *testing.F) {
	f.Add([]byte(`{"a": "b c", "d": [1, 2]}`), 7)
	f.Add([]byte(`"é\"\\ x"`), 3)
	f.Fuzz(func(t *testing.T, v []byte, n int) {
		if !json.Valid(v) || n < 0 || n > 1<<16 {
			return
		}
		want, wantCut := shortenReference(v, n)
		if got, cut := shorten(v, n); got != want || cut != wantCut {
			t.Errorf("shorten(%q, %d) = %q, %v; want %q, %v", v, n, got, cut, want, wantCut)
		}
	})
}
