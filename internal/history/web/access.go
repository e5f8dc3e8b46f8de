package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// What a caller may read, as the apiserver governs it: `list` on a
// resource shows the entries of its objects (in a namespace, or
// everywhere), as listing would show the objects; `get` alone shows the
// entries of the object the query names (name=, and namespace= for a
// namespaced one), as getting it would. The actor details of an entry
// (user uid and groups, user agent, source IPs) take `get` on the
// non-resource URL ActorsPath.
const (
	listVerb = "list"
	getVerb  = "get"
	// ActorsPath is the non-resource URL whose `get` shows a caller the
	// actor details of the entries it may read. Not under /api/: the
	// ClusterRole system:discovery lets every authenticated user get
	// /api/*.
	ActorsPath = "/fieldwatch/history/actors"
)

// maxChecks bounds the access decisions one request makes for entries
// decided one by one (their resource in each namespace it meets): past
// it, the page ends and its next cursor goes on from there.
const maxChecks = 64

// everything is the resource of a review that asks whether a caller may
// list every resource everywhere.
var everything = history.GroupResource{Group: "*", Resource: "*"}

// decider decides what one request's caller may read.
type decider struct {
	auth *auth
	c    *caller
	q    *history.Query
	// decided are the decisions made entry by entry, by resource and
	// namespace.
	decided map[history.Ref]bool
	// throttled is set when the review gate refused a decision.
	throttled bool
	// actors is whether the caller sees actor details, once asked.
	actors *bool
}

func (s *Server) decider(c *caller, q *history.Query) *decider {
	return &decider{auth: s.auth, c: c, q: q, decided: map[history.Ref]bool{}}
}

// access returns what the caller may read of q, decided before the store
// reads any entry: nil for everything. A resource the caller may list
// where the query looks (its namespace, or everywhere) is read in full;
// with a namespace, one it may only get is read when the query names the
// object, and the others not at all, so that the answer takes as long
// whether the namespace holds entries or not; without one, the others are
// decided entry by entry (decider.check).
func (d *decider) access(ctx context.Context, store history.Store) (*history.Access, error) {
	if d.c.all {
		return nil, nil
	}
	if ok, err := d.auth.allowed(ctx, d.c, listVerb, everything, "", ""); err != nil || ok {
		return nil, err
	}
	all, err := store.Resources(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b history.GroupResource) int {
		return strings.Compare(a.Group+"/"+a.Resource, b.Group+"/"+b.Resource)
	})
	a := &history.Access{}
	for _, gr := range all {
		if d.q.Resource != "" && (gr.Resource != d.q.Resource || d.q.GroupSet && gr.Group != d.q.Group) {
			continue
		}
		ok, err := d.auth.allowed(ctx, d.c, listVerb, gr, d.q.Namespace, "")
		if err != nil {
			return nil, err
		}
		switch {
		case ok:
			a.Resources = append(a.Resources, gr)
		case d.q.Namespace == "":
			a.Checked = append(a.Checked, gr)
		case d.q.Name != "":
			if ok, err = d.auth.allowed(ctx, d.c, getVerb, gr, d.q.Namespace, d.q.Name); err != nil {
				return nil, err
			}
			if ok {
				a.Resources = append(a.Resources, gr)
			}
		}
	}
	if len(a.Checked) > 0 {
		a.Check = d.check
	}
	return a, nil
}

// check decides an entry of a resource the caller may not list
// everywhere, by its namespace (and, when the query names the object, by
// that name): history.Access.Check.
func (d *decider) check(ctx context.Context, r history.Ref) (bool, error) {
	key := history.Ref{GroupResource: r.GroupResource, Namespace: r.Namespace}
	if ok, done := d.decided[key]; done {
		return ok, nil
	}
	if len(d.decided) >= maxChecks {
		return false, history.ErrStop
	}
	ok, err := d.auth.allowed(ctx, d.c, listVerb, r.GroupResource, r.Namespace, "")
	if err == nil && !ok && d.q.Name != "" {
		ok, err = d.auth.allowed(ctx, d.c, getVerb, r.GroupResource, r.Namespace, d.q.Name)
	}
	if errors.Is(err, errThrottled) {
		d.throttled = true
		return false, fmt.Errorf("%w: %w", history.ErrStop, err)
	}
	if err != nil {
		return false, err
	}
	d.decided[key] = ok
	return ok, nil
}

// showActors reports whether the caller sees the actor details.
func (d *decider) showActors(ctx context.Context) (bool, error) {
	if d.actors == nil {
		ok, err := d.auth.allowedPath(ctx, d.c, getVerb, ActorsPath)
		if err != nil {
			return false, err
		}
		d.actors = &ok
	}
	return *d.actors, nil
}

// filter returns e's payload as the caller may see it: a CRD change's
// objects hit kept only where it may list that custom resource, and the
// actor details left out unless it may see them.
func (d *decider) filter(ctx context.Context, e *history.Entry) error {
	if d.c.all || e.Payload == nil {
		return nil
	}
	var err error
	if isCRD(e) {
		if e.Payload, err = d.filterImpact(ctx, e.Payload); err != nil {
			return err
		}
	}
	show, err := d.showActors(ctx)
	if err != nil || show {
		return err
	}
	e.Payload = withoutActorDetails(e.Payload)
	return nil
}

// isCRD reports whether e is about a CustomResourceDefinition.
func isCRD(e *history.Entry) bool {
	return e.Group == "apiextensions.k8s.io" && e.Resource == "customresourcedefinitions"
}

// filterImpact returns the payload of a CRD change with the objects its
// impact names (crd.impact[].objects) kept only where the caller may list
// that custom resource in that namespace; each impact that lost some says
// how many in a last key, "hidden". Namespaces past the request's
// decisions (maxChecks), or whose decision the review gate refused, are
// hidden too. Keys keep their order; other payloads come back as they
// are.
func (d *decider) filterImpact(ctx context.Context, payload []byte) ([]byte, error) {
	var crdName string
	var impact []byte
	_ = jsonscan.EachKey(payload, func(key string, value []byte) error {
		if key == "crd" {
			return jsonscan.EachKey(value, func(key string, value []byte) error {
				switch key {
				case "crd":
					_ = json.Unmarshal(value, &crdName)
				case "impact":
					impact = value
				}
				return nil
			})
		}
		return nil
	})
	if len(impact) == 0 || crdName == "" {
		return payload, nil
	}
	resource, group, _ := strings.Cut(crdName, ".")
	gr := history.GroupResource{Group: group, Resource: resource}
	if ok, err := d.auth.allowed(ctx, d.c, listVerb, gr, "", ""); err != nil || ok {
		return payload, err
	}
	var impacts []json.RawMessage
	if err := json.Unmarshal(impact, &impacts); err != nil {
		return payload, nil //nolint:nilerr // not an impact list: nothing to filter
	}
	changed := false
	for i, im := range impacts {
		var objectsValue []byte
		_ = jsonscan.EachKey(im, func(key string, value []byte) error {
			if key == "objects" {
				objectsValue = value
			}
			return nil
		})
		var objects []json.RawMessage
		if json.Unmarshal(objectsValue, &objects) != nil {
			continue
		}
		kept := objects[:0:0]
		for _, o := range objects {
			var ref struct {
				Namespace string `json:"namespace"`
			}
			_ = json.Unmarshal(o, &ref)
			ok, err := d.check(ctx, history.Ref{GroupResource: gr, Namespace: ref.Namespace})
			if err != nil && !errors.Is(err, history.ErrStop) {
				return nil, err
			}
			if ok {
				kept = append(kept, o)
			}
		}
		if len(kept) == len(objects) {
			continue
		}
		changed = true
		im = replaceValue(im, objectsValue, joinJSON(kept))
		impacts[i] = append(im[:len(im)-1:len(im)-1], fmt.Sprintf(`,"hidden":%d}`, len(objects)-len(kept))...)
	}
	if !changed {
		return payload, nil
	}
	return replaceValue(payload, impact, joinJSON(impacts)), nil
}

// joinJSON writes values as a JSON array.
func joinJSON(values []json.RawMessage) []byte {
	list := []byte{'['}
	for k, v := range values {
		if k > 0 {
			list = append(list, ',')
		}
		list = append(list, v...)
	}
	return append(list, ']')
}

// withoutActorDetails returns payload with its actor reduced to what
// every reader of the entry sees: manager, operation, the usernames of
// user and impersonatedUser, verb, auditID, match and candidates; uids,
// groups, extra, userAgent and sourceIPs are left out. Keys keep their
// order.
func withoutActorDetails(payload []byte) []byte {
	var actor []byte
	_ = jsonscan.EachKey(payload, func(key string, value []byte) error {
		if key == "actor" {
			actor = value
		}
		return nil
	})
	if actor == nil || actor[0] != '{' {
		return payload
	}
	var out bytes.Buffer
	out.WriteByte('{')
	put := func(key string, value []byte) {
		if out.Len() > 1 {
			out.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		out.Write(k)
		out.WriteByte(':')
		out.Write(value)
	}
	err := jsonscan.EachKey(actor, func(key string, value []byte) error {
		switch key {
		case "user", "impersonatedUser":
			var name []byte
			if value[0] == '{' {
				_ = jsonscan.EachKey(value, func(key string, value []byte) error {
					if key == "username" {
						name = value
					}
					return nil
				})
			}
			if name != nil {
				put(key, append(append([]byte(`{"username":`), name...), '}'))
			}
		case "manager", "operation", "verb", "auditID", "match", "candidates":
			put(key, value)
		}
		return nil
	})
	if err != nil {
		return payload
	}
	out.WriteByte('}')
	return replaceValue(payload, actor, out.Bytes())
}

// replaceValue returns a copy of doc with the bytes of old (a subslice of
// it) replaced by repl.
func replaceValue(doc, old, repl []byte) []byte {
	start := cap(doc) - cap(old)
	out := make([]byte, 0, len(doc)-len(old)+len(repl))
	out = append(out, doc[:start]...)
	out = append(out, repl...)
	return append(out, doc[start+len(old):]...)
}
