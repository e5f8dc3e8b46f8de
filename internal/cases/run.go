package cases

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/crd/impact"
	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/payload"
	"github.com/fieldwatch/fieldwatch/rules"
)

// Result is the outcome of one case.
type Result struct {
	Name   string
	Source string
	// Pass is true when every expectation held.
	Pass bool
	// Diff says, one line per problem, what differs from the
	// expectation ("" when Pass).
	Diff string
	// Firings are the payloads of the rules that fired, in rule order.
	Firings []json.RawMessage
	// Errors are the evaluation errors.
	Errors []string
	// Series and OldSeries are the series of the metrics from fields the
	// object and the old object give (RunMetrics).
	Series, OldSeries []string
}

// Run evaluates every case against set and checks its expectations.
func Run(set *rules.Set, cases []Case) []Result { return RunMetrics(set, nil, cases) }

// RunMetrics is Run that also computes the series of the metrics from
// fields ms (nil: none) for each case's objects and checks them against
// expect.series and expect.oldSeries.
func RunMetrics(set *rules.Set, ms *fieldmetrics.Set, cases []Case) []Result {
	out := make([]Result, len(cases))
	for i := range cases {
		out[i] = run(set, &cases[i])
		series(ms, &cases[i], &out[i])
	}
	return out
}

// series computes the series of c's objects and checks them.
func series(ms *fieldmetrics.Set, c *Case, res *Result) {
	var problems []string
	if ms.Empty() && (c.Expect.Series != nil || c.Expect.OldSeries != nil) {
		problems = append(problems, "expect.series: no metrics are configured (a rules file's metrics section, or --metrics-config)")
	}
	ch := &c.Change
	var errs, oldErrs []error
	if ch.Type != change.Deleted {
		res.Series, errs = ms.Series(ch.Resource, ch.New)
	}
	if ch.Type != change.Created {
		res.OldSeries, oldErrs = ms.Series(ch.Resource, ch.Old)
	}
	for _, e := range append(errs, oldErrs...) {
		res.Errors = append(res.Errors, "metrics: "+e.Error())
	}
	for _, x := range []struct {
		key       string
		want, got []string
	}{{"expect.series", c.Expect.Series, res.Series}, {"expect.oldSeries", c.Expect.OldSeries, res.OldSeries}} {
		if x.want == nil {
			continue
		}
		want := slices.Sorted(slices.Values(x.want))
		if !slices.Equal(want, x.got) {
			problems = append(problems, fmt.Sprintf("%s differs (- expected, + got):\n%s", x.key, LineDiff(want, x.got)))
		}
	}
	if len(problems) > 0 {
		res.Pass = false
		if res.Diff != "" {
			res.Diff += "\n"
		}
		res.Diff += strings.Join(problems, "\n")
	}
}

func run(set *rules.Set, c *Case) Result {
	res := Result{Name: c.Name, Source: c.Source}
	ch := c.Change
	var problems []string
	if set.WantsCRDImpact(&ch) {
		crd, err := crdImpact(&ch, c.Objects)
		if err != nil {
			problems = append(problems, "crd impact: "+err.Error())
		}
		ch.CRD = crd
	}
	firings, errs := set.Eval(&ch)
	fired := make([]string, 0, len(firings))
	changes := map[string]any{}
	crds := map[string]any{}
	routed := map[string][]int{}
	for _, f := range firings {
		fired = append(fired, f.Rule.Name)
		routed[f.Rule.Name] = []int{}
		for i := range f.Rule.Actions {
			if !slices.Contains(f.Skipped, i) {
				routed[f.Rule.Name] = append(routed[f.Rule.Name], i)
			}
		}
		res.Firings = append(res.Firings, json.RawMessage(f.Payload))
		// Not payload.Unmarshal: a case's objects may leave out what a
		// real object always has (a uid, a resourceVersion).
		var p payload.Payload
		if err := json.Unmarshal(f.Payload, &p); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: payload: %v", f.Rule.Name, err))
		}
		var err error
		if changes[f.Rule.Name], err = normaliseJSON(p.Changes); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: changes: %v", f.Rule.Name, err))
		}
		if crds[f.Rule.Name], err = normaliseJSON(p.CRD); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: crd: %v", f.Rule.Name, err))
		}
		problems = append(problems, renderTemplates(f)...)
	}
	for _, e := range errs {
		res.Errors = append(res.Errors, e.Error())
	}
	for _, name := range c.Expect.Fire {
		if set.Rule(name) == nil {
			problems = append(problems, fmt.Sprintf("expect.fire: no rule named %q", name))
		}
	}
	missing, unexpected := setDiff(c.Expect.Fire, fired), setDiff(fired, c.Expect.Fire)
	if len(missing) > 0 || len(unexpected) > 0 {
		line := fmt.Sprintf("fired %v, expected %v", fired, c.Expect.Fire)
		if len(missing) > 0 {
			line += fmt.Sprintf("; did not fire: %v", missing)
		}
		if len(unexpected) > 0 {
			line += fmt.Sprintf("; fired unexpectedly: %v", unexpected)
		}
		problems = append(problems, line)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Expect.Changes)) {
		got, ok := changes[name]
		if !ok {
			continue // reported as did not fire
		}
		want, err := normaliseJSON(c.Expect.Changes[name])
		if err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: expected changes: %v", name, err))
			continue
		}
		// Both sides come from encoding/json: numbers are float64.
		if !reflect.DeepEqual(want, got) {
			problems = append(problems, fmt.Sprintf("rule %s: changes differ (- expected, + got):\n%s", name, LineDiff(jsonLines(want), jsonLines(got))))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Expect.CRD)) {
		got, ok := crds[name]
		if !ok {
			continue // reported as did not fire
		}
		want, err := normaliseJSON(c.Expect.CRD[name])
		if err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: expected crd: %v", name, err))
			continue
		}
		if got == nil {
			problems = append(problems, fmt.Sprintf("rule %s: the payload has no crd (the rule has no crd key and its when does not read crd)", name))
			continue
		}
		if shown := shape(want, got); !reflect.DeepEqual(want, shown) {
			problems = append(problems, fmt.Sprintf("rule %s: crd differs (- expected, + got, keys not expected left out):\n%s", name,
				LineDiff(crdLines(want), crdLines(shown))))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Expect.Actions)) {
		if got, ok := routed[name]; ok && !slices.Equal(got, c.Expect.Actions[name]) {
			problems = append(problems, fmt.Sprintf("rule %s: actions %v get the firing, expected %v (an action's when decides)", name, got, c.Expect.Actions[name]))
		}
	}
	problems = append(problems, checkErrors(c.Expect.Errors, res.Errors)...)
	res.Pass = len(problems) == 0
	res.Diff = strings.Join(problems, "\n")
	return res
}

// renderTemplates renders the templates of f's actions (webhook bodies,
// Event notes) as delivery would, so that a template that fails or is
// stopped at a limit fails the case offline.
func renderTemplates(f rules.Firing) []string {
	var problems []string
	for i, a := range f.Rule.Actions {
		var t *rules.Template
		key := ""
		switch {
		case a.Webhook != nil && a.Webhook.Template != nil:
			t, key = a.Webhook.Template, "webhook.template"
		case a.Event != nil && a.Event.Note != nil:
			t, key = a.Event.Note, "event.note"
		case a.PagerDuty != nil && a.PagerDuty.DedupKey != nil:
			t, key = a.PagerDuty.DedupKey, "pagerduty.dedupKey"
		default:
			continue
		}
		if _, err := t.Render(f.Payload); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: actions[%d].%s: %v", f.Rule.Name, i, key, err))
		}
	}
	return problems
}

// checkErrors matches evaluation errors against expected substrings.
func checkErrors(want, got []string) []string {
	var problems []string
	if want == nil {
		for _, e := range got {
			problems = append(problems, "evaluation error: "+e)
		}
		return problems
	}
	for _, e := range got {
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(e, w) }) {
			problems = append(problems, "unexpected evaluation error: "+e)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, w) }) {
			problems = append(problems, fmt.Sprintf("no evaluation error contains %q", w))
		}
	}
	return problems
}

// setDiff returns the elements of a not in b.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// normaliseJSON round-trips v through JSON, so that expectations and the
// parts of a decoded payload compare as plain JSON values (nil for a nil
// pointer or slice).
func normaliseJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out any
	err = json.Unmarshal(b, &out)
	return out, err
}

// jsonLines renders a list one compact JSON item per line (anything else
// on one line).
func jsonLines(v any) []string {
	l, ok := v.([]any)
	if !ok {
		return []string{compactJSON(v)}
	}
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = compactJSON(x)
	}
	return out
}

// compactJSON renders v as the payload does: compact, map keys sorted,
// no HTML escaping.
func compactJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// impact compares the CRDs of an update and scans the objects for the
// impact of its breaking checks, as `fieldwatch run` does with the
// objects it caches.
func crdImpact(ch *rules.Change, objects []map[string]any) (*diff.Result, error) {
	oldCRD, err := diff.FromMap(ch.Old)
	if err != nil {
		return nil, fmt.Errorf("oldObject: %w", err)
	}
	newCRD, err := diff.FromMap(ch.New)
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	res := diff.Compare(oldCRD, newCRD)
	if err := impact.Scan(context.Background(), newCRD, res, slices.Values(objects)); err != nil {
		return nil, err
	}
	return res, nil
}

// shape returns got restricted to what want names: the keys of want's
// maps (recursively), and, for lists of want's length, each item shaped
// by want's item. Anything else is got as it is.
func shape(want, got any) any {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return got
		}
		out := make(map[string]any, len(w))
		for k, wv := range w {
			if gv, ok := g[k]; ok {
				out[k] = shape(wv, gv)
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return got
		}
		out := make([]any, len(g))
		for i := range g {
			out[i] = shape(w[i], g[i])
		}
		return out
	}
	return got
}

// crdLines renders an expected or shaped crd one key per line, and the
// items of its lists one per line, for a readable diff.
func crdLines(v any) []string {
	m, ok := v.(map[string]any)
	if !ok {
		return []string{compactJSON(v)}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if l, ok := m[k].([]any); ok {
			out = append(out, k+":")
			for _, item := range l {
				out = append(out, "  "+compactJSON(item))
			}
			continue
		}
		out = append(out, k+": "+compactJSON(m[k]))
	}
	return out
}
