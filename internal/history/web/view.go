package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// The pages' view of an entry, decoded from its payload
// (docs/payload.md) for the templates.

// entryView is one entry on a page.
type entryView struct {
	Time            string
	ISO             string
	Type            string
	Rule            string
	Kind            string
	Resource        string // plural.group, kubectl's form
	Version         string
	Object          string // namespace/name, or name
	Namespace, Name string
	UID             string
	ID              string
	Source          string
	Cluster         string
	Who             string
	// Manager, User, Impersonated, Verb and Match say how the change was
	// attributed.
	Manager, User, Impersonated, Verb, Match, UserAgent string
	Changes                                             []changeView
	More                                                int // changes left out on the timeline
	CRD                                                 *crdView
	// Omitted is the size of a payload left out (history.Entry.Omitted).
	Omitted int64
	// Problem is what the trail's last verification found wrong with the
	// entry ("": nothing).
	Problem string
}

// changeView is one change: its path, old and new values as JSON.
type changeView struct {
	Op, Path         string
	Old, New         string
	HasOld, HasNew   bool
	OldLong, NewLong bool // cut
}

// crdView is a CRD change's upgrade safety check.
type crdView struct {
	Name                         string
	Breaking, Unknown, Safe, Hit int
	Checks                       []crdCheck
	Impacts                      []crdImpact
	ImpactError                  string
	Scanned                      int
}

type crdCheck struct {
	Version, Field, Path, Check, Severity, Message string
}

type crdImpact struct {
	Check, Version, Field, Effect, Message, Error string
	Count, Hidden                                 int
	Objects                                       []crdObject
}

type crdObject struct {
	Namespace, Name, Field, Error string
}

// payloadView is what the pages decode of a payload.
type payloadView struct {
	Resource struct {
		Version string `json:"version"`
		Kind    string `json:"kind"`
	} `json:"resource"`
	Changes []struct {
		Op       string          `json:"op"`
		Path     string          `json:"path"`
		Value    json.RawMessage `json:"value"`
		OldValue json.RawMessage `json:"oldValue"`
	} `json:"changes"`
	Actor struct {
		Manager string `json:"manager"`
		User    struct {
			Username string `json:"username"`
		} `json:"user"`
		ImpersonatedUser struct {
			Username string `json:"username"`
		} `json:"impersonatedUser"`
		Verb      string `json:"verb"`
		UserAgent string `json:"userAgent"`
		Match     string `json:"match"`
	} `json:"actor"`
	CRD *struct {
		CRD      string `json:"crd"`
		Breaking int    `json:"breaking"`
		Unknown  int    `json:"unknown"`
		Safe     int    `json:"safe"`
		Scanned  int    `json:"scanned"`
		Checks   []struct {
			Version  string `json:"version"`
			Path     string `json:"path"`
			Field    string `json:"field"`
			Check    string `json:"check"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
		} `json:"checks"`
		Impact []struct {
			Check   string `json:"check"`
			Version string `json:"version"`
			Field   string `json:"field"`
			Effect  string `json:"effect"`
			Count   int    `json:"count"`
			Hidden  int    `json:"hidden"`
			Message string `json:"message"`
			Error   string `json:"error"`
			Objects []struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
				Field     string `json:"field"`
				Error     string `json:"error"`
			} `json:"objects"`
		} `json:"impact"`
		ImpactError string `json:"impactError"`
	} `json:"crd"`
}

// timeFormat is how the pages write times (UTC).
const timeFormat = "2006-01-02 15:04:05Z"

// viewOf returns e's view; on the timeline (brief) at most maxChanges
// changes, each value cut at valueBrief bytes.
func viewOf(e *history.Entry, brief bool) entryView {
	var p payloadView
	_ = json.Unmarshal(e.Payload, &p) // the entry was parsed from it: a failure leaves the fields empty
	v := entryView{
		Time: e.Time.UTC().Format(timeFormat), ISO: e.Time.UTC().Format(time.RFC3339Nano), Type: string(e.Type), Rule: e.Rule,
		Kind: p.Resource.Kind, Resource: resourceName(e.Group, e.Resource), Version: p.Resource.Version,
		Object: e.Name, Namespace: e.Namespace, Name: e.Name, UID: e.UID, ID: e.ID, Source: string(e.Source), Cluster: e.Cluster, Who: e.Who(),
		Manager: p.Actor.Manager, User: p.Actor.User.Username, Impersonated: p.Actor.ImpersonatedUser.Username,
		Verb: p.Actor.Verb, Match: p.Actor.Match, UserAgent: p.Actor.UserAgent, Omitted: e.Omitted,
	}
	if v.Kind == "" {
		v.Kind = e.Resource
	}
	if e.Namespace != "" {
		v.Object = e.Namespace + "/" + e.Name
	}
	limit, cut := len(p.Changes), 4000
	if brief {
		limit, cut = min(limit, maxChanges), valueBrief
	}
	for _, c := range p.Changes[:limit] {
		cv := changeView{Op: c.Op, Path: c.Path, HasOld: len(c.OldValue) > 0, HasNew: len(c.Value) > 0}
		cv.Old, cv.OldLong = shorten(c.OldValue, cut)
		cv.New, cv.NewLong = shorten(c.Value, cut)
		v.Changes = append(v.Changes, cv)
	}
	v.More = len(p.Changes) - limit
	if c := p.CRD; c != nil {
		cv := &crdView{Name: c.CRD, Breaking: c.Breaking, Unknown: c.Unknown, Safe: c.Safe, Scanned: c.Scanned, ImpactError: c.ImpactError}
		for _, ch := range c.Checks {
			cv.Checks = append(cv.Checks, crdCheck{Version: ch.Version, Field: ch.Field, Path: ch.Path, Check: ch.Check, Severity: ch.Severity, Message: ch.Message})
		}
		for _, im := range c.Impact {
			iv := crdImpact{Check: im.Check, Version: im.Version, Field: im.Field, Effect: im.Effect, Message: im.Message,
				Error: im.Error, Count: im.Count, Hidden: im.Hidden}
			for _, o := range im.Objects {
				iv.Objects = append(iv.Objects, crdObject{Namespace: o.Namespace, Name: o.Name, Field: o.Field, Error: o.Error})
			}
			cv.Hit += im.Count
			cv.Impacts = append(cv.Impacts, iv)
		}
		v.CRD = cv
	}
	return v
}

// The timeline shows a few changes of each entry, briefly.
const (
	maxChanges = 3
	valueBrief = 80
)

// shorten returns the JSON value v compacted, cut at n bytes (on a rune
// boundary). It reads no more of v than the n bytes it keeps need: a
// value may be megabytes.
func shorten(v json.RawMessage, n int) (string, bool) {
	if len(v) == 0 {
		return "", false
	}
	out := make([]byte, 0, min(len(v), n+utf8.UTFMax))
	inString, escaped := false, false
	i := 0
	for ; i < len(v) && len(out) <= n; i++ {
		c := v[i]
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		out = append(out, c)
	}
	rest := bytes.TrimSpace(v[i:])
	if len(out) <= n && len(rest) == 0 {
		return string(out), false
	}
	cut := min(n, len(out))
	for cut > 0 && !isRuneStart(out[cut]) {
		cut--
	}
	return string(out[:cut]) + "…", true
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// resourceName writes a resource as kubectl does: plural.group, or the
// plural alone in the core group.
func resourceName(group, resource string) string {
	if group == "" {
		return resource
	}
	return resource + "." + group
}

// describe writes the filters of q for the page's summary.
func describe(q *history.Query) string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s %s", name, v))
		}
	}
	r := q.Resource
	if q.GroupSet {
		r = resourceName(q.Group, q.Resource)
	}
	add("resource", r)
	add("namespace", q.Namespace)
	add("name", q.Name)
	add("uid", q.UID)
	add("user", q.User)
	add("rule", q.Rule)
	add("type", string(q.Type))
	add("cluster", q.Cluster)
	if !q.Since.IsZero() {
		add("since", q.Since.Format(timeFormat))
	}
	if !q.Until.IsZero() {
		add("until", q.Until.Format(timeFormat))
	}
	return strings.Join(parts, ", ")
}
