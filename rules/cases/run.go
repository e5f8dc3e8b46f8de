package cases

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

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
}

// Run evaluates every case against set and checks its expectations.
func Run(set *rules.Set, cases []Case) []Result {
	out := make([]Result, len(cases))
	for i := range cases {
		out[i] = run(set, &cases[i])
	}
	return out
}

func run(set *rules.Set, c *Case) Result {
	res := Result{Name: c.Name, Source: c.Source}
	ch := c.Change
	firings, errs := set.Eval(&ch)
	var problems []string
	fired := make([]string, 0, len(firings))
	changes := map[string]any{}
	for _, f := range firings {
		fired = append(fired, f.Rule.Name)
		res.Firings = append(res.Firings, json.RawMessage(f.Payload))
		var p struct {
			Changes any `json:"changes"`
		}
		if err := json.Unmarshal(f.Payload, &p); err != nil {
			problems = append(problems, fmt.Sprintf("rule %s: payload is not JSON: %v", f.Rule.Name, err))
		}
		changes[f.Rule.Name] = p.Changes
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
	problems = append(problems, checkErrors(c.Expect.Errors, res.Errors)...)
	res.Pass = len(problems) == 0
	res.Diff = strings.Join(problems, "\n")
	return res
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

// normaliseJSON round-trips v through JSON, so that it compares with a
// decoded payload.
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
