package action

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/payload"
)

// A digest is what the messages of the direct receivers (slack, teams,
// pagerduty, email) say of a group of firings, built from their payloads
// (payload.Payload): a one-line summary of all of them, the first few
// listed with their changes, the rest counted. Each receiver renders it in
// its own format within its own limits.
type digest struct {
	Rule    string
	Cluster string
	// Total is how many firings the message stands for; Entries lists
	// the first of them, More counts the others (Total = len(Entries) +
	// More).
	Total   int
	Summary string
	Entries []entry
	More    int
	// Link is the history of the rule's firings, with --external-url.
	Link string
	// Time is the first firing's time.
	Time time.Time
	// Items are the firings.
	Items []*item
}

// entry is one listed firing.
type entry struct {
	ID        string
	Type      change.Type
	Kind      string
	Namespace string
	Name      string
	// Who is who made the change: the user, or the field manager.
	Who string
	// Title is "Kind namespace/name updated by who".
	Title   string
	Changes []changeLine
	// MoreChanges counts the changes not listed.
	MoreChanges int
	// Link is the object's history page, with --external-url.
	Link string
	// CRD is a one-line account of a CRD change's checks; "" otherwise.
	CRD string
}

// changeLine is one change as a message shows it: values as compact JSON
// cut to maxValueRunes.
type changeLine struct {
	Op       string
	Path     string
	Old, New string
}

// Digest bounds.
const (
	maxChangesListed = 5
	maxValueRunes    = 120
)

// newDigest builds the digest of items (one group, in queue order),
// listing at most listed of them.
func newDigest(items []*item, listed int, cluster, externalURL string) *digest {
	d := &digest{Total: len(items), Cluster: cluster, Items: items}
	first := items[0].f
	d.Rule = first.Rule.Name
	d.Time = first.Time
	if externalURL != "" {
		d.Link = externalURL + "/history?" + url.Values{"rule": {d.Rule}}.Encode()
	}
	d.Summary = summarize(items)
	n := min(listed, len(items))
	for _, it := range items[:n] {
		d.Entries = append(d.Entries, newEntry(it, externalURL))
	}
	d.More = len(items) - n
	return d
}

// drop moves the last listed entries into More until at most n are
// listed (a receiver's limits).
func (d *digest) drop(n int) {
	if n < len(d.Entries) {
		d.More += len(d.Entries) - n
		d.Entries = d.Entries[:n]
	}
}

// who names who made the change of f: the user (the impersonated one when
// there is one), else the field manager.
func who(f *firingView) string {
	switch {
	case f.Impersonated != "":
		return f.Impersonated
	case f.User != "":
		return f.User
	case f.Manager != "":
		return f.Manager + " (manager)"
	}
	return ""
}

// firingView is the part of a rules.Firing a digest reads.
type firingView struct {
	User, Impersonated, Manager string
}

func newEntry(it *item, externalURL string) entry {
	f := it.f
	e := entry{
		ID: f.ID, Type: f.Type, Kind: f.Object.Kind, Namespace: f.Object.Namespace, Name: f.Object.Name,
		Who: who(&firingView{f.User, f.Impersonated, f.Manager}),
	}
	if externalURL != "" && f.Object.UID != "" {
		e.Link = externalURL + "/history/object?" + url.Values{"uid": {f.Object.UID}}.Encode()
	}
	e.Title = e.Kind + " " + objectName(e.Namespace, e.Name) + " " + string(e.Type)
	if e.Who != "" {
		e.Title += " by " + e.Who
	}
	var p payload.Payload
	if err := payload.Unmarshal(f.Payload, &p); err != nil {
		e.Changes = []changeLine{{Op: "error", Path: "payload: " + err.Error()}}
		return e
	}
	for i, c := range p.Changes {
		if i == maxChangesListed {
			e.MoreChanges = len(p.Changes) - i
			break
		}
		e.Changes = append(e.Changes, changeLine{Op: string(c.Op), Path: c.Path, Old: shortValue(c.OldValue), New: shortValue(c.Value)})
	}
	if c := p.CRD; c != nil {
		e.CRD = fmt.Sprintf("CRD %s: %d breaking, %d safe checks", c.Name, c.Breaking, c.Safe)
		if n := impactCount(c); n > 0 {
			e.CRD += fmt.Sprintf("; %d objects hit", n)
		}
	}
	return e
}

func impactCount(c *payload.CRD) int {
	n := 0
	for _, im := range c.Impact {
		n += im.Count
	}
	return n
}

// objectName is namespace/name, or name for a cluster-scoped object.
func objectName(ns, name string) string {
	if ns == "" {
		return name
	}
	return ns + "/" + name
}

// shortValue renders a JSON value compactly, cut to maxValueRunes; "" for
// none.
func shortValue(v json.RawMessage) string {
	if v == nil {
		return ""
	}
	s := string(v)
	if len(s) > 0 && s[0] == '"' {
		var str string
		if json.Unmarshal(v, &str) == nil {
			s = strconv.Quote(str)
		}
	}
	return truncateRunes(s, maxValueRunes)
}

// truncateRunes cuts s to at most n runes, ending it with "…" when cut.
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n-1, 0)]) + "…"
}

// truncateBytes cuts s to at most n bytes on a rune boundary, ending it
// with "…" when cut.
func truncateBytes(s string, n int) string {
	return truncate(s, n, "…")
}

// summarize says what a group of firings is in one line: "Widget shop/w1
// updated by alice" for one, "12 widgets in shop updated by alice" for
// several, "in 3 namespaces", "by 2 users" where they differ. It reads
// only the firings' object references, not their payloads.
func summarize(items []*item) string {
	f := items[0].f
	if len(items) == 1 {
		s := f.Object.Kind + " " + objectName(f.Object.Namespace, f.Object.Name) + " " + string(f.Type)
		if w := who(&firingView{f.User, f.Impersonated, f.Manager}); w != "" {
			s += " by " + w
		}
		return f.Rule.Name + ": " + s
	}
	var kinds, nss, users, typs []string
	add := func(list *[]string, v string) {
		if !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	for _, it := range items {
		add(&kinds, it.f.Object.Resource)
		add(&nss, it.f.Object.Namespace)
		add(&typs, string(it.f.Type))
		add(&users, who(&firingView{it.f.User, it.f.Impersonated, it.f.Manager}))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d ", f.Rule.Name, len(items))
	if len(kinds) == 1 {
		b.WriteString(kinds[0])
	} else {
		b.WriteString("objects")
	}
	switch {
	case len(nss) == 1 && nss[0] != "":
		b.WriteString(" in " + nss[0])
	case len(nss) > 1:
		fmt.Fprintf(&b, " in %d namespaces", len(nss))
	}
	if len(typs) == 1 {
		b.WriteString(" " + typs[0])
	} else {
		b.WriteString(" changed")
	}
	switch {
	case len(users) == 1 && users[0] != "":
		b.WriteString(" by " + users[0])
	case len(users) > 1:
		fmt.Fprintf(&b, " by %d users", len(users))
	}
	return b.String()
}

// changeText is a change in one line: "/spec/size: 1 → 2".
func (c changeLine) text() string {
	switch c.Op {
	case string(payload.OpAdd):
		return c.Path + ": + " + c.New
	case string(payload.OpRemove):
		return c.Path + ": − " + c.Old
	case string(payload.OpReplace):
		return c.Path + ": " + c.Old + " → " + c.New
	}
	return c.Path
}

// MoreLine is the line that counts what a message does not list.
func (d *digest) MoreLine() string {
	if d.More == 0 {
		return ""
	}
	s := fmt.Sprintf("and %d more", d.More)
	if d.Link != "" {
		s += " (all of them in the history)"
	} else {
		s += " (all of them in fieldwatch's history)"
	}
	return s
}
