package testenv

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series are the samples of one scrape: each series as
// name{label="value",...} with its labels sorted, and its value.
type Series map[string]float64

// Scrape gets url (a Prometheus exposition in the text format) and
// returns its series whose names start with prefix.
func Scrape(url, prefix string) (Series, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return ParseSeries(resp.Body, prefix)
}

// ParseSeries reads an exposition in the text format.
func ParseSeries(r io.Reader, prefix string) (Series, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	out := Series{}
	for name, f := range fams {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			slices.Sort(labels)
			v := m.GetGauge().GetValue()
			if m.Untyped != nil {
				v = m.GetUntyped().GetValue()
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = v
		}
	}
	return out, nil
}

// With returns the series whose key contains every one of parts.
func (s Series) With(parts ...string) Series {
	out := Series{}
	for k, v := range s {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(k, p)
		}
		if all {
			out[k] = v
		}
	}
	return out
}
