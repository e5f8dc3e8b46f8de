package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
)

// historyObjectUsage is the usage of fieldwatch history show and diff.
const historyObjectUsage = `usage: fieldwatch history show RESOURCE[.GROUP] [NAMESPACE/]NAME --at TIME [-o yaml|json] [source flags]
       fieldwatch history diff RESOURCE[.GROUP] [NAMESPACE/]NAME --from T1 --to T2 [-o text|json] [source flags]

show prints the object as it was at TIME (YAML, or the API's JSON answer),
after a comment saying who made the last change before it; diff prints
what changed between T1 and T2 as a unified diff of the two YAML states,
then the changes in between with their users. Both need a rule with
history: {states: true} that selects the object. Times are RFC 3339 or
durations before now (90m). Redacted values stay "<redacted>".
`

// historyObjectCmd runs fieldwatch history show (diff false) or diff.
func historyObjectCmd(ctx context.Context, diff bool, args []string, stdout, stderr io.Writer) int {
	name := "fieldwatch history show"
	if diff {
		name = "fieldwatch history diff"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, historyObjectUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	var o historyOptions
	var at, from, to string
	fs.StringVar(&o.server, "server", "", "a running fieldwatch's history address (default http://127.0.0.1:8081, the chart's and deploy/'s history port)")
	fs.StringVar(&o.tokenFile, "token-file", "", "a file holding the bearer token to send to --server")
	fs.StringVar(&o.stateDir, "state-dir", "", "read DIR/history.db offline instead of asking a server")
	fs.StringVar(&o.dsn, "dsn", "", "read the PostgreSQL history of --history-dsn offline")
	if diff {
		fs.StringVar(&o.output, "o", "text", "output format: text (a unified YAML diff and the changes) or json (the API's answer)")
		fs.StringVar(&from, "from", "", "the earlier time (RFC 3339, or a duration before now)")
		fs.StringVar(&to, "to", "", "the later time (RFC 3339, or a duration before now; default now)")
	} else {
		fs.StringVar(&o.output, "o", "yaml", "output format: yaml or json (the API's answer)")
		fs.StringVar(&at, "at", "", "the time (RFC 3339, or a duration before now; default now)")
	}
	// Flags may come before, between or after the two arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	bad := func(format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		return 2
	}
	if len(pos) != 2 {
		return bad("want RESOURCE[.GROUP] and [NAMESPACE/]NAME, got %d arguments", len(pos))
	}
	key, err := history.ParseObjectKey(pos[0], pos[1])
	if err != nil {
		return bad("%v", err)
	}
	if (diff && o.output != "text" && o.output != "json") || (!diff && o.output != "yaml" && o.output != "json") {
		return bad("-o %q: not an output format of this command", o.output)
	}
	now := time.Now()
	parse := func(flagName, s string) (time.Time, error) {
		if s == "" && flagName != "from" {
			return now, nil
		}
		t, err := history.ParseStateTime(s, now)
		if err != nil {
			return time.Time{}, fmt.Errorf("--%s: %w", flagName, err)
		}
		return t, nil
	}
	var tAt, tFrom, tTo time.Time
	if diff {
		if tFrom, err = parse("from", from); err == nil {
			tTo, err = parse("to", to)
		}
		if err == nil && !tFrom.Before(tTo) {
			err = errors.New("--from must be before --to")
		}
	} else {
		tAt, err = parse("at", at)
	}
	if err != nil {
		return bad("%v", err)
	}
	src, err := o.objectSource(ctx)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if errors.Is(err, errBadInput) {
			return 2
		}
		return 1
	}
	defer src.close()
	body, err := src.object(ctx, key, tAt, tFrom, tTo)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", name, err)
		if errors.Is(err, errBadInput) {
			return 2
		}
		return 1
	}
	if o.output == "json" {
		_, err = stdout.Write(body)
	} else if diff {
		err = printObjectDiff(stdout, key, body)
	} else {
		err = printObject(stdout, key, body)
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// objectSource is where the command reads an object's states.
type objectSource interface {
	// object returns the objects API's answer (web.APIObject at at, or
	// web.APIDiff between from and to when at is zero).
	object(ctx context.Context, key history.ObjectKey, at, from, to time.Time) ([]byte, error)
	close()
}

func (o *historyOptions) objectSource(ctx context.Context) (objectSource, error) {
	src, err := o.source(ctx)
	if err != nil {
		return nil, err
	}
	return src.(objectSource), nil
}

// object implements objectSource offline: the store's states.
func (s storeSource) object(ctx context.Context, key history.ObjectKey, at, from, to time.Time) ([]byte, error) {
	mark := func(err error) error {
		if errors.Is(err, history.ErrNoStates) || errors.Is(err, history.ErrBeforeStates) || errors.Is(err, history.ErrNotStates) {
			return fmt.Errorf("%w: %v", errBadInput, err)
		}
		return err
	}
	if !at.IsZero() {
		r, err := history.Rebuild(ctx, s.s, key, at)
		if err != nil {
			return nil, mark(err)
		}
		return json.Marshal(web.ObjectOf(&r, at))
	}
	d, err := history.DiffStates(ctx, s.s, key, from, to)
	if err != nil {
		return nil, mark(err)
	}
	return json.Marshal(web.DiffOf(&d, from, to))
}

// object implements objectSource: the server's objects API.
func (s *serverSource) object(ctx context.Context, key history.ObjectKey, at, from, to time.Time) ([]byte, error) {
	u := *s.base
	path, query, _ := strings.Cut(web.ObjectURL(key, at, from, to), "?")
	u.Path = strings.TrimSuffix(u.Path, "/") + path // Kubernetes names need no escaping
	u.RawQuery = query
	return s.get(ctx, &u)
}

// get returns the body of a 200 answer to u; a 400's error is
// errBadInput.
func (s *serverSource) get(ctx context.Context, u fmt.Stringer) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		err := fmt.Errorf("%s: %s", resp.Status, e.Error)
		if resp.StatusCode == http.StatusBadRequest {
			err = fmt.Errorf("%w: %v", errBadInput, err)
		}
		return nil, err
	}
	return body, nil
}

// who names who made a change: the impersonated user, the user, the
// field manager, or "an unknown user".
func who(c *web.APIChange) string {
	switch {
	case c.ImpersonatedUser != "":
		return c.ImpersonatedUser + " (as impersonated by " + c.User + ")"
	case c.User != "":
		return c.User
	case c.Manager != "":
		return "field manager " + c.Manager
	}
	return "an unknown user"
}

// lastLine says what the last change before a state was.
func lastLine(c *web.APIChange) string {
	if c.Baseline {
		return fmt.Sprintf("as fieldwatch found it at %s (resourceVersion %s)", c.Time, c.ResourceVersion)
	}
	return fmt.Sprintf("%s at %s by %s (resourceVersion %s)", c.Type, c.Time, who(c), c.ResourceVersion)
}

// objectYAML is the YAML of an answer's object, or a comment when it did
// not exist.
func objectYAML(o *web.APIObject) ([]byte, error) {
	if string(o.Object) == "null" {
		return []byte("# (no object: deleted)\n"), nil
	}
	return yaml.JSONToYAML(o.Object)
}

// printObject writes web.APIObject body as YAML, after a comment.
func printObject(w io.Writer, key history.ObjectKey, body []byte) error {
	var o web.APIObject
	if err := json.Unmarshal(body, &o); err != nil {
		return fmt.Errorf("not an object's answer: %w", err)
	}
	y, err := objectYAML(&o)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "# %s at %s\n# last change: %s\n%s", key, o.At, lastLine(&o.Last), y)
	return err
}

// printObjectDiff writes web.APIDiff body as a unified diff of the two
// YAML states and the list of changes between.
func printObjectDiff(w io.Writer, key history.ObjectKey, body []byte) error {
	var d web.APIDiff
	if err := json.Unmarshal(body, &d); err != nil {
		return fmt.Errorf("not a diff's answer: %w", err)
	}
	a, err := objectYAML(&d.From)
	if err != nil {
		return err
	}
	b, err := objectYAML(&d.To)
	if err != nil {
		return err
	}
	text, err := web.UnifiedDiff(key, d.From.At, string(a), d.To.At, string(b))
	if err != nil {
		return err
	}
	if text == "" {
		text = "(no difference)\n"
	}
	if _, err := io.WriteString(w, text); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(w, "\n%d change(s) between:\n", len(d.Changes))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "TIME\tTYPE\tRESOURCEVERSION\tWHO\tCHANGES")
	for i := range d.Changes {
		c := &d.Changes[i]
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Time, c.Type, c.ResourceVersion, who(c), opsSummary(c.Changes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if d.More {
		_, _ = fmt.Fprintf(w, "(more changes than %d: narrow the range)\n", history.MaxDiffChanges)
	}
	return nil
}

// opsSummary writes a change's operations briefly: the first two paths
// and how many more.
func opsSummary(ops json.RawMessage) string {
	var list []struct{ Op, Path string }
	if len(ops) == 0 || json.Unmarshal(ops, &list) != nil || len(list) == 0 {
		return "-"
	}
	var parts []string
	for i, o := range list {
		if i == 2 {
			parts = append(parts, fmt.Sprintf("+%d more", len(list)-2))
			break
		}
		parts = append(parts, o.Op+" "+o.Path)
	}
	return strings.Join(parts, "; ")
}
