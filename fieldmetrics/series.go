package fieldmetrics

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"

	"github.com/fieldwatch/fieldwatch/change"
)

// Series returns the series obj, an object of res, gives: lines of the
// text exposition format without comments, sorted, and the evaluation
// errors met on the way (what `fieldwatch test` shows of a case). The
// bounds are the defaults of Options.
func (s *Set) Series(res change.Resource, obj map[string]any) ([]string, []error) {
	if s.Empty() || obj == nil {
		return nil, nil
	}
	var errs []error
	sc := NewScraper(s, Options{Logger: slog.New(slog.DiscardHandler), onError: func(err error) { errs = append(errs, err) }})
	var b bytes.Buffer
	if err := sc.WriteTo(context.Background(), oneObject{res, obj}, &b, expfmt.NewFormat(expfmt.TypeTextPlain)); err != nil {
		return nil, append(errs, err)
	}
	var lines []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines, errs
}

// oneObject is a Source of one object.
type oneObject struct {
	res change.Resource
	obj map[string]any
}

func (o oneObject) Snapshots(want func(change.Resource) bool) []Snapshot {
	if !want(o.res) {
		return nil
	}
	return []Snapshot{{Resource: o.res, Objects: func(yield func(Object) bool) { yield(&mapObject{o.obj}) }}}
}

// mapObject is an Object of a decoded map; Map returns it as it is (the
// scraper only reads it).
type mapObject struct{ m map[string]any }

func (o *mapObject) Map() map[string]any { return o.m }
