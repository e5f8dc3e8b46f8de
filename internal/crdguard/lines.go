package crdguard

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Warnings follow the apiserver's guidance: at most 120 characters each
// (the apiserver cuts longer ones and drops warnings past 4 KiB in all),
// so a review says at most maxWarnings lines.
const (
	maxLine     = 120
	maxWarnings = 20
	prefix      = "fieldwatch: "
	// maxSamples is how many objects a line may name.
	maxSamples = 5
)

// fit cuts s to at most n characters, ending it with "…" when it cuts.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// number writes n with thousands separators: 50,000.
func number(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// objectsOf says "1 object" or "12 objects".
func objectsOf(n int, kind string) string {
	if kind == "" {
		kind = "object"
	}
	if n == 1 {
		return "1 " + kind
	}
	return number(n) + " " + kind + "s"
}

// withSamples ends head with as many of names as fit in a warning,
// ": a, b, c", then " +N" for the objects of total not named.
func withSamples(head string, names []string, total int) string {
	line := head
	named := 0
	for i, name := range names {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		more := ""
		if rest := total - named - 1; rest > 0 {
			more = " +" + number(rest)
		}
		if utf8.RuneCountInString(line+sep+name+more) > maxLine {
			break
		}
		line += sep + name
		named++
	}
	if rest := total - named; rest > 0 && named > 0 {
		line += " +" + number(rest)
	}
	return fit(line, maxLine)
}

// sample is one object named in a line.
type sample struct{ ns, name string }

func (s sample) String() string {
	if s.ns == "" {
		return s.name
	}
	return s.ns + "/" + s.name
}

func (s sample) less(o sample) bool {
	if s.ns != o.ns {
		return s.ns < o.ns
	}
	return s.name < o.name
}

// tally counts objects and keeps the first maxSamples of them in
// namespace/name order, whatever order they come in.
type tally struct {
	n     int
	first []sample
}

func (t *tally) add(ns, name string) {
	t.n++
	s := sample{ns: ns, name: name}
	k := len(t.first)
	if k == maxSamples && !s.less(t.first[k-1]) {
		return
	}
	i := sort.Search(k, func(i int) bool { return s.less(t.first[i]) })
	if k < maxSamples {
		t.first = append(t.first, sample{})
	}
	copy(t.first[i+1:], t.first[i:])
	t.first[i] = s
}

// names returns the samples as namespace/name, or as names alone when
// all share one namespace that the line already says (ns != "").
func (t *tally) names(ns string) []string {
	out := make([]string, len(t.first))
	for i, s := range t.first {
		if ns != "" && s.ns == ns {
			out[i] = s.name
		} else {
			out[i] = s.String()
		}
	}
	return out
}

// capLines keeps at most maxWarnings lines: past it, the last one says how
// many more there were.
func capLines(lines []string, more string) []string {
	if len(lines) <= maxWarnings {
		return lines
	}
	n := len(lines) - (maxWarnings - 1)
	out := append(lines[:maxWarnings-1:maxWarnings-1], fit(prefix+"and "+number(n)+" more "+more, maxLine))
	return out
}
