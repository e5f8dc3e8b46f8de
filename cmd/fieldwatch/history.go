package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/web"
	"github.com/fieldwatch/fieldwatch/payload"
)

const historyUsage = `usage: fieldwatch history [--server URL [--token-file FILE] | --state-dir DIR | --dsn DSN]
                          [--resource R] [-n NAMESPACE] [--name N] [--uid U] [--user U] [--rule R] [--type T]
                          [--since T] [--until T] [--limit N] [--cursor C] [--all] [-o table|json]

Prints what fieldwatch fired, newest first: from a running fieldwatch's
/api/v1/history (--server, default http://127.0.0.1:8081, the chart's
and deploy/'s history port, as after kubectl -n fieldwatch port-forward
pod/fieldwatch-0 8081; a fieldwatch run without --history-addr serves it
on --http-addr, :8080), or offline
from a state directory copied out of a pod (--state-dir; read only) or
the PostgreSQL database of --history-dsn (--dsn). A server answers with
what the token's user may read (--token-file; without one, only a server
run with --history-insecure-loopback answers, to a loopback request). Filters are those of the API; --since and
--until take RFC 3339 times or durations before now (24h). The table
ends with the cursor of the next page, if any; --all follows it.

fieldwatch history show RESOURCE[.GROUP] [NAMESPACE/]NAME --at TIME prints
an object as it was at a time, and fieldwatch history diff ... --from T1
--to T2 what changed between two times, for the objects a rule with
history: {states: true} selects (fieldwatch history show -h).

Exit codes: 0 printed; 1 the history could not be read; 2 bad input.
`

// historyOptions are the flags of fieldwatch history.
type historyOptions struct {
	server, tokenFile, stateDir, dsn string
	output                           string
	all                              bool
}

func historyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && (args[0] == "show" || args[0] == "diff") {
		return historyObjectCmd(ctx, args[0] == "diff", args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("fieldwatch history", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, historyUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	var o historyOptions
	fs.StringVar(&o.server, "server", "", "a running fieldwatch's history address (default http://127.0.0.1:8081, the chart's and deploy/'s history port)")
	fs.StringVar(&o.tokenFile, "token-file", "", "a file holding the bearer token to send to --server (such as `kubectl create token NAME > FILE`)")
	fs.StringVar(&o.stateDir, "state-dir", "", "read DIR/history.db offline instead of asking a server")
	fs.StringVar(&o.dsn, "dsn", "", "read the PostgreSQL history of --history-dsn offline (password from $PGPASSWORD or a passfile)")
	fs.StringVar(&o.output, "o", "table", "output format: table or json (the API's page)")
	fs.BoolVar(&o.all, "all", false, "follow the cursor to the end (with --limit as the page size)")
	filters := map[string]*string{}
	for _, p := range history.QueryParams {
		v := new(string)
		filters[p.Name] = v
		fs.StringVar(v, p.Name, "", p.Takes)
	}
	fs.StringVar(filters["namespace"], "n", "", "short for --namespace")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history: no arguments are taken (%q): filters are flags\n", fs.Arg(0))
		return 2
	}
	if o.output != "table" && o.output != "json" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history: -o %q: want table or json\n", o.output)
		return 2
	}
	sources := 0
	for _, s := range []string{o.server, o.stateDir, o.dsn} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch history: give one of --server, --state-dir and --dsn")
		return 2
	}
	// The cursor is the source's own (a server's is sealed): it is
	// handed back as it came.
	cursor := *filters["cursor"]
	v := url.Values{}
	for name, p := range filters {
		if *p != "" && name != "cursor" {
			v.Set(name, *p)
		}
	}
	q, err := history.ParseQuery(v, time.Now())
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history: %v\n", err)
		return 2
	}
	src, err := o.source(ctx)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history: %v\n", err)
		return openFailed(err)
	}
	defer src.close()
	var entries []history.Entry
	var next string
	for {
		page, err := src.query(ctx, q, cursor)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history: %v\n", err)
			if errors.Is(err, errBadInput) {
				return 2
			}
			return 1
		}
		entries = append(entries, page.entries...)
		next = page.next
		if !o.all || next == "" {
			break
		}
		cursor = next
	}
	if err := printHistory(stdout, o.output, entries, next); err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history: %v\n", err)
		return 1
	}
	return 0
}

// errBadInput marks an error of the command line (exit 2).
var errBadInput = errors.New("bad input")

// openFailed is the exit code of a history that could not be opened: 2
// for bad input (a database a newer fieldwatch wrote included), else 1.
func openFailed(err error) int {
	if errors.Is(err, errBadInput) || errors.Is(err, history.ErrNewerSchema) {
		return 2
	}
	return 1
}

// historyPage is a page as the command reads it.
type historyPage struct {
	entries []history.Entry
	next    string
}

// historySource is where the command reads the history.
type historySource interface {
	// query returns the page of q that starts at cursor, the next of a
	// page it returned ("": the first).
	query(ctx context.Context, q history.Query, cursor string) (historyPage, error)
	close()
}

func (o *historyOptions) source(ctx context.Context) (historySource, error) {
	switch {
	case o.stateDir != "":
		s, err := history.OpenSQLite(filepath.Join(o.stateDir, "history.db"), history.SQLiteOptions{ReadOnly: true})
		if err != nil {
			return nil, err
		}
		return storeSource{s}, nil
	case o.dsn != "":
		s, err := history.OpenPostgres(ctx, o.dsn, history.PostgresOptions{})
		if err != nil {
			return nil, err
		}
		return storeSource{s}, nil
	}
	server := o.server
	if server == "" {
		server = "http://127.0.0.1:8081"
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: --server %q: want http://HOST:PORT or https://HOST:PORT", errBadInput, server)
	}
	src := &serverSource{base: u, client: &http.Client{Timeout: 30 * time.Second}}
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("%w: --token-file: %v", errBadInput, err)
		}
		src.token = strings.TrimSpace(string(b))
	}
	return src, nil
}

// storeSource reads a store offline.
type storeSource struct{ s history.Store }

func (s storeSource) query(ctx context.Context, q history.Query, cursor string) (historyPage, error) {
	if cursor != "" {
		c, err := history.ParseCursor(cursor)
		if err != nil {
			return historyPage{}, fmt.Errorf("%w: --cursor: %v", errBadInput, err)
		}
		q.After = &c
	}
	p, err := s.s.Query(ctx, q)
	if err != nil {
		return historyPage{}, err
	}
	out := historyPage{entries: p.Entries}
	if p.Next != nil {
		out.next = p.Next.String()
	}
	return out, nil
}

func (s storeSource) close() { _ = s.s.Close() }

// serverSource asks a running fieldwatch.
type serverSource struct {
	base   *url.URL
	token  string
	client *http.Client
}

func (s *serverSource) query(ctx context.Context, q history.Query, cursor string) (historyPage, error) {
	u := *s.base
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/history"
	v := q.Values()
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	u.RawQuery = v.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return historyPage{}, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return historyPage{}, fmt.Errorf("%s: %w", u.Host, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return historyPage{}, fmt.Errorf("%s: %w", u.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(body))
		}
		err := fmt.Errorf("%s: %s: %s", u.Host, resp.Status, e.Error)
		if resp.StatusCode == http.StatusBadRequest {
			err = fmt.Errorf("%w: %v", errBadInput, err)
		}
		return historyPage{}, err
	}
	var page web.APIPage
	if err := json.Unmarshal(body, &page); err != nil {
		return historyPage{}, fmt.Errorf("%s: not a history page: %w", u.Host, err)
	}
	out := historyPage{next: page.Next}
	for _, a := range page.Entries {
		e, err := history.ParsePayload(a.Payload, a.Source)
		if err != nil {
			return historyPage{}, fmt.Errorf("%s: entry %d: %w", u.Host, a.Seq, err)
		}
		e.Seq, e.Omitted = a.Seq, a.Omitted
		e.Recorded, _ = time.Parse(time.RFC3339Nano, a.Recorded)
		out.entries = append(out.entries, e)
	}
	return out, nil
}

func (s *serverSource) close() { s.client.CloseIdleConnections() }

// printHistory writes the entries as a table or as the API's JSON page.
func printHistory(w io.Writer, output string, entries []history.Entry, next string) error {
	if output == "json" {
		b, err := web.MarshalPage(web.PageOf(entries, next))
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	// The cluster column when the entries name one (--cluster-name).
	clusters := slices.ContainsFunc(entries, func(e history.Entry) bool { return e.Cluster != "" })
	if clusters {
		_, _ = fmt.Fprint(tw, "CLUSTER\t")
	}
	_, _ = fmt.Fprintln(tw, "TIME\tTYPE\tRESOURCE\tOBJECT\tWHO\tRULE\tCHANGES")
	for i := range entries {
		e := &entries[i]
		if clusters {
			_, _ = fmt.Fprintf(tw, "%s\t", cmp.Or(e.Cluster, "-"))
		}
		object := e.Name
		if e.Namespace != "" {
			object = e.Namespace + "/" + e.Name
		}
		resource := e.Resource
		if e.Group != "" {
			resource += "." + e.Group
		}
		who := e.Who()
		if who == "" {
			who = "-"
		}
		changes := changesSummary(e.Payload)
		if e.Omitted > 0 {
			changes = fmt.Sprintf("(a payload of %d bytes, over the server's --history-max-response-bytes)", e.Omitted)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.UTC().Format("2006-01-02T15:04:05Z"), e.Type, resource, object,
			who, e.Rule, changes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != "" {
		_, _ = fmt.Fprintf(w, "more: --cursor %s (or --all)\n", next)
	}
	return nil
}

// changesSummary writes a payload's changes briefly: the first two as
// path old -> new, and how many more. It shows what it can of a payload
// that does not decode.
func changesSummary(data []byte) string {
	var p payload.Payload
	_ = json.Unmarshal(data, &p)
	brief := func(v json.RawMessage) string {
		s := string(v)
		if s == "" {
			return "-"
		}
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return s
	}
	var parts []string
	for i, c := range p.Changes {
		if i == 2 {
			parts = append(parts, fmt.Sprintf("+%d more", len(p.Changes)-2))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %s -> %s", c.Path, brief(c.OldValue), brief(c.Value)))
	}
	if p.CRD != nil {
		parts = append(parts, fmt.Sprintf("crd: %d breaking", p.CRD.Breaking))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}
