package history

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/fieldwatch/fieldwatch/change"
)

// Query limits.
const (
	// DefaultLimit is the entries a page holds when the query names no
	// limit.
	DefaultLimit = 100
	// MaxLimit caps a page: a larger limit is lowered to it.
	MaxLimit = 1000
	// maxValue bounds the length of a filter's value (a Kubernetes name
	// is 253 bytes at most; a username has no bound, so allow more).
	maxValue = 1024
)

// The history's time range: entry times and the times a query takes lie
// within [MinTime, MaxTime). The embedded store keys an entry by its time
// in microseconds times 1024, which an int64 holds from about 1685 to
// 2255; the range is narrower, so that both stores answer alike.
var (
	MinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
)

// clampTime returns t within [MinTime, MaxTime]; the zero time (no bound)
// stays zero.
func clampTime(t time.Time) time.Time {
	switch {
	case t.IsZero():
		return t
	case t.Before(MinTime):
		return MinTime
	case t.After(MaxTime):
		return MaxTime
	}
	return t
}

// Query selects entries, newest first. Its zero value selects every
// entry, DefaultLimit at a time.
type Query struct {
	// Resource is the plural resource name; Group its API group, when
	// GroupSet (resource=widgets.example.com sets both, resource=widgets
	// matches widgets of any group).
	Resource, Group string
	GroupSet        bool
	// Namespace, Name and UID select one namespace, the objects of one
	// name, one object.
	Namespace, Name, UID string
	// User matches the authenticated or the impersonated user's name.
	User string
	Rule string
	Type change.Type
	// Cluster selects the entries of one cluster (--cluster-name of the
	// instance that wrote them).
	Cluster string
	// Since (inclusive) and Until (exclusive) bound the entries' time;
	// zero is no bound.
	Since, Until time.Time
	// After, when set, selects only entries older than it: the Next of
	// the previous page.
	After *Cursor
	// Limit is the most entries a page holds (DefaultLimit when 0;
	// MaxLimit at most).
	Limit int
	// Access, when set, keeps only the entries it allows; nil keeps
	// every entry.
	Access *Access
	// MaxBytes, when positive, bounds the payload bytes of a page: it
	// ends (with Next) before the entry that would take it over. An
	// entry whose payload alone is larger comes without it (Omitted),
	// so that paging goes on.
	MaxBytes int64
	// Reserve, when set, is called with the payload bytes of a page
	// before any of them is read; when it returns false, Query reads
	// none and fails with ErrBusy. The caller releases what it reserved.
	Reserve func(bytes int64) bool
}

// GroupResource names a resource: its API group ("" for the core group)
// and its plural name.
type GroupResource struct{ Group, Resource string }

// Ref is what Access.Check is told of an entry: its resource and object.
type Ref struct {
	GroupResource
	Namespace, Name string
}

// Access restricts a query to the entries of some resources, decided
// before an entry's payload is read. The entries it leaves out count
// toward the scan window like those the other filters leave out.
type Access struct {
	// Resources are read in full (within the query's filters).
	Resources []GroupResource
	// Checked are read entry by entry: Check decides each of their
	// entries, by its resource and namespace (Ref.Name is for a decision
	// that also hangs on the query's own name filter): once it refused a
	// resource in a namespace, the page leaves out that resource's other
	// entries there unasked. When it returns ErrStop (wrapped or not)
	// the page ends before that entry, its Next at the entry; any other
	// error fails the query.
	Checked []GroupResource
	Check   func(ctx context.Context, r Ref) (bool, error)
}

// empty reports whether a leaves nothing to read.
func (a *Access) empty() bool { return a != nil && len(a.Resources) == 0 && len(a.Checked) == 0 }

// ErrStop is what Access.Check returns to end a page before the entry it
// was asked about.
var ErrStop = errors.New("history: the page ends here")

// ErrBusy is returned (wrapped) by Query when Query.Reserve refused the
// bytes of the page.
var ErrBusy = errors.New("history: too many bytes being read")

// Cursor is a place in the history's order: newest first by time, then
// by sequence number.
type Cursor struct {
	Time int64 // microseconds since the epoch
	Seq  int64
}

// CursorOf returns the cursor of e.
func CursorOf(e *Entry) Cursor { return Cursor{Time: e.Time.UnixMicro(), Seq: e.Seq} }

// String returns the cursor as the API writes it: opaque to clients.
func (c Cursor) String() string {
	return strconv.FormatInt(c.Time, 10) + "-" + strconv.FormatInt(c.Seq, 10)
}

// ParseCursor reads a cursor written by Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	t, seq, ok := strings.Cut(s, "-")
	if ok {
		ti, err1 := strconv.ParseInt(t, 10, 64)
		si, err2 := strconv.ParseInt(seq, 10, 64)
		if err1 == nil && err2 == nil && si >= 0 {
			return Cursor{Time: ti, Seq: si}, nil
		}
	}
	return Cursor{}, fmt.Errorf("cursor %q: not a cursor this API returned (use the \"next\" of the previous page)", s)
}

// Page is a query's answer.
type Page struct {
	// Entries are newest first.
	Entries []Entry
	// Next, when set, is where the next page starts: entries older than
	// the last one here, or than the part of the history this page went
	// through when it ended at the scan window (then it may hold fewer
	// entries than the limit, even none) or where Access stopped it.
	Next *Cursor
	// Scanned is at most how many entries the page went through,
	// matching or not: no more than the scan window when the query
	// filters on what its index does not order (or has Access), else
	// those it returned and the one after.
	Scanned int
}

// QueryParams are the URL parameters ParseQuery reads, with what each
// takes, for error messages and the docs.
var QueryParams = []struct{ Name, Takes string }{
	{"resource", "a resource's plural name, optionally with its group: widgets, widgets.example.com, deployments.apps, configmaps"},
	{"namespace", "a namespace"},
	{"name", "an object's name"},
	{"uid", "an object's uid"},
	{"user", "a user's name, authenticated or impersonated (from the audit stream)"},
	{"rule", "a rule's name"},
	{"type", "created, updated or deleted"},
	{"cluster", "a cluster's name, as its fieldwatch's --cluster-name gives it"},
	{"since", "a time (RFC 3339, 2026-12-01T00:00:00Z) or a duration before now (24h, 90m); times before 1970 or after 2200 are taken as those"},
	{"until", "a time (RFC 3339) or a duration before now; times before 1970 or after 2200 are taken as those"},
	{"cursor", "the \"next\" of the previous page"},
	{"limit", fmt.Sprintf("entries per page, 1 to %d (default %d; more is lowered to %d)", MaxLimit, DefaultLimit, MaxLimit)},
}

// ParseQuery reads a query from URL parameters, validating each: an
// unknown or repeated parameter, an empty or overlong value, a value with
// control characters, an unknown type, a time that does not parse, a
// range that ends before it starts, a cursor this API did not write, a
// limit that is not a positive number: each is an error that says what
// the parameter takes. A limit above MaxLimit is lowered to it; since and
// until outside [MinTime, MaxTime] are clamped to it (after the range
// check), as every store keeps its entries within it. now is what a
// duration is before. v is what url.ParseQuery returns: a caller that
// parses a raw query must refuse it when url.ParseQuery fails (a ";", a
// bad "%" escape), since the pair it dropped may be a filter.
func ParseQuery(v url.Values, now time.Time) (Query, error) {
	var q Query
	for name, values := range v {
		if !slices.ContainsFunc(QueryParams, func(p struct{ Name, Takes string }) bool { return p.Name == name }) {
			return Query{}, fmt.Errorf("unknown parameter %q: the parameters are %s", truncate(name), paramNames())
		}
		if len(values) != 1 {
			return Query{}, fmt.Errorf("parameter %q given %d times: give it once", name, len(values))
		}
		if err := checkValue(name, values[0]); err != nil {
			return Query{}, err
		}
	}
	q.Namespace, q.Name, q.UID, q.User, q.Rule = v.Get("namespace"), v.Get("name"), v.Get("uid"), v.Get("user"), v.Get("rule")
	q.Cluster = v.Get("cluster")
	if r := v.Get("resource"); r != "" {
		q.Resource, q.Group, q.GroupSet = strings.Cut(r, ".")
		if strings.ContainsAny(q.Resource, "/") || q.Resource == "" || (q.GroupSet && q.Group == "") {
			return Query{}, fmt.Errorf("parameter \"resource\" %q: want %s", truncate(r), takes("resource"))
		}
	}
	if t := v.Get("type"); t != "" {
		q.Type = change.Type(t)
		switch q.Type {
		case change.Created, change.Updated, change.Deleted:
		default:
			return Query{}, fmt.Errorf("parameter \"type\" %q: want created, updated or deleted", truncate(t))
		}
	}
	var err error
	if q.Since, err = parseTime(v, "since", now); err != nil {
		return Query{}, err
	}
	if q.Until, err = parseTime(v, "until", now); err != nil {
		return Query{}, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return Query{}, fmt.Errorf("parameter \"until\" (%s) is not after \"since\" (%s)", q.Until.Format(time.RFC3339), q.Since.Format(time.RFC3339))
	}
	q.Since, q.Until = clampTime(q.Since), clampTime(q.Until)
	if c := v.Get("cursor"); c != "" {
		cur, err := ParseCursor(c)
		if err != nil {
			return Query{}, fmt.Errorf("parameter \"cursor\": %w", err)
		}
		q.After = &cur
	}
	if l := v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return Query{}, fmt.Errorf("parameter \"limit\" %q: want %s", truncate(l), takes("limit"))
		}
		q.Limit = n
	}
	q.Limit = q.limit()
	return q, nil
}

// limit returns the page size q asks for, defaulted and capped.
func (q *Query) limit() int {
	switch {
	case q.Limit <= 0:
		return DefaultLimit
	case q.Limit > MaxLimit:
		return MaxLimit
	}
	return q.Limit
}

// Values returns the URL parameters of q, as ParseQuery reads them.
func (q *Query) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	r := q.Resource
	if q.GroupSet {
		r += "." + q.Group
	}
	set("resource", r)
	set("namespace", q.Namespace)
	set("name", q.Name)
	set("uid", q.UID)
	set("user", q.User)
	set("rule", q.Rule)
	set("type", string(q.Type))
	set("cluster", q.Cluster)
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.After != nil {
		v.Set("cursor", q.After.String())
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	return v
}

// checkValue refuses empty and overlong values and control characters.
func checkValue(name, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("parameter %q is empty: leave it out, or want %s", name, takes(name))
	case len(s) > maxValue:
		return fmt.Errorf("parameter %q is %d bytes long: %d at most", name, len(s), maxValue)
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }) >= 0:
		return fmt.Errorf("parameter %q holds control characters or invalid UTF-8", name)
	}
	return nil
}

// parseTime reads a time parameter: RFC 3339, or a duration before now.
func parseTime(v url.Values, name string, now time.Time) (time.Time, error) {
	s := v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("parameter %q %q: want %s", name, truncate(s), takes(name))
}

func takes(name string) string {
	for _, p := range QueryParams {
		if p.Name == name {
			return p.Takes
		}
	}
	return ""
}

func paramNames() string {
	names := make([]string, len(QueryParams))
	for i, p := range QueryParams {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// truncate shortens a value quoted in an error message.
func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
