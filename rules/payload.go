package rules

import (
	"bytes"
	"sync"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/payload"
)

// Redacted replaces redacted values in payloads: payload.Redacted.
const Redacted = payload.Redacted

// TimeFormat is the payload's time format: payload.TimeFormat.
const TimeFormat = payload.TimeFormat

// secretRedact are the paths redacted in every Secret (core group,
// resource secrets): the values of data and stringData, keys kept, and
// kubectl's last-applied-configuration annotation, in which a client-side
// `kubectl apply` stores the whole Secret it applied (stringData in plain
// text, data in base64).
var secretRedact = []*fieldPath{
	mustCompilePath("data[*]"),
	mustCompilePath("stringData[*]"),
	mustCompilePath(`metadata.annotations["` + lastAppliedAnnotation + `"]`),
}

// isSecret reports whether a resource is the core group's Secrets, whose
// values are always redacted.
func isSecret(group, resource string) bool { return group == "" && resource == "secrets" }

// lastAppliedAnnotation is where client-side `kubectl apply` keeps a copy
// of the object it applied.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

func mustCompilePath(s string) *fieldPath {
	p, err := compilePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// payloadBufs holds the buffers payloads are built in: a payload is
// copied out of one at its size, so that a large one costs one allocation
// instead of a buffer grown (and its tail cleared) step by step
// (BenchmarkEvalLongValue).
var payloadBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxPooledPayload bounds the buffers kept in payloadBufs: a rare huge
// payload (includeObject on a large object) does not stay in the pool.
const maxPooledPayload = 256 << 10

// firing builds the firing of r on st.c with changes ops. It never changes
// the change's maps: redaction copies what it rewrites.
func (r *Rule) firing(st *evalState, ops []patchOp) (Firing, error) {
	c := st.c
	meta := c.meta()
	ref := ObjectRef{
		Group:           c.Resource.Group,
		Version:         c.Resource.Version,
		Resource:        c.Resource.Resource,
		Kind:            c.Resource.Kind,
		Namespace:       st.ns,
		Name:            st.name,
		UID:             metaString(meta, "uid"),
		ResourceVersion: metaString(meta, "resourceVersion"),
	}
	actor, hasActor := actorOf(c, ops)
	redact := r.redact
	if isSecret(c.Resource.Group, c.Resource.Resource) {
		redact = append(append([]*fieldPath(nil), secretRedact...), redact...)
	}
	oldLocs, newLocs := redactLocations(redact, c.Old), redactLocations(redact, c.New)
	id := payloadID(c.Type, ref, r.Name)

	// The payload (payload.Payload, docs/payload.md), keys in the
	// contract's order, built in a pooled buffer and copied out at its
	// size. TestPayloadsMatchType holds it to the type.
	buf := payloadBufs.Get().(*[]byte)
	b := (*buf)[:0]
	defer func() {
		if cap(b) <= maxPooledPayload {
			*buf = b[:0]
			payloadBufs.Put(buf)
		}
	}()
	b = append(b, `{"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"time":"`...)
	b = c.Time.UTC().AppendFormat(b, TimeFormat)
	b = append(b, `","rule":`...)
	b = appendJSONString(b, r.Name)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, string(c.Type))
	if o := c.observed(); o != change.ObservedWatch {
		// A net effect: left out for a change from one watch event.
		b = append(b, `,"observed":`...)
		b = appendJSONString(b, string(o))
	}
	if c.Cluster != "" {
		b = append(b, `,"cluster":`...)
		b = appendJSONString(b, c.Cluster)
	}
	b = append(b, `,"resource":{"group":`...)
	b = appendJSONString(b, ref.Group)
	b = append(b, `,"version":`...)
	b = appendJSONString(b, ref.Version)
	b = append(b, `,"resource":`...)
	b = appendJSONString(b, ref.Resource)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, ref.Kind)
	b = append(b, `},"namespace":`...)
	b = appendJSONString(b, ref.Namespace)
	b = append(b, `,"name":`...)
	b = appendJSONString(b, ref.Name)
	b = append(b, `,"uid":`...)
	b = appendJSONString(b, ref.UID)
	b = append(b, `,"resourceVersion":`...)
	b = appendJSONString(b, ref.ResourceVersion)
	b = append(b, `,"changes":[`...)
	var err error
	for i, o := range ops {
		if i > 0 {
			b = append(b, ',')
		}
		o.Path = pointer(o.toks)
		o.Value = redactValue(o.toks, o.Value, newLocs)
		o.OldValue = redactValue(o.toks, o.OldValue, oldLocs)
		if b, err = o.appendJSON(b); err != nil {
			return Firing{}, err
		}
	}
	b = append(b, ']')
	b, _ = appendActor(b, actor, hasActor, c.Attribution)
	b = appendGuard(b, c.Attribution)
	if r.crd != crdNone {
		v, err := st.crdView(r.crd == crdImpact, r.crdPolicy)
		if err != nil {
			return Firing{}, err
		}
		b = append(b, `,"crd":`...)
		b = append(b, v.json...)
	}
	if r.IncludeObject {
		if c.New != nil {
			b = append(b, `,"object":`...)
			if b, err = appendJSON(b, redactValue(nil, c.New, newLocs)); err != nil {
				return Firing{}, err
			}
		}
		if c.Old != nil {
			b = append(b, `,"oldObject":`...)
			if b, err = appendJSON(b, redactValue(nil, c.Old, oldLocs)); err != nil {
				return Firing{}, err
			}
		}
	}
	b = append(b, '}')
	f := Firing{ID: id, Rule: r, Payload: bytes.Clone(b), Object: ref, Time: c.Time.UTC().Truncate(time.Microsecond), Type: c.Type, Cluster: c.Cluster}
	if hasActor {
		f.Manager = actor.Manager
	}
	if a := c.Attribution; a != nil {
		if a.User != nil {
			f.User = a.User.Username
		}
		if a.ImpersonatedUser != nil {
			f.Impersonated = a.ImpersonatedUser.Username
		}
	}
	return f, nil
}

// redactLocations returns the locations paths select in obj, as a tree.
func redactLocations(paths []*fieldPath, obj map[string]any) *locTree {
	if obj == nil || len(paths) == 0 {
		return nil
	}
	locs := &locTree{}
	for _, p := range paths {
		p.everyLocation(obj, func(toks []string) {
			if _, ok := valueAt(obj, toks); ok {
				locs.add(toks)
			}
		})
	}
	return locs
}

// redactValue returns v, the value at toks, with every location in locs at
// or below toks replaced by Redacted (copying, never changing, v), in one
// pass over v.
func redactValue(toks []string, v any, locs *locTree) any {
	covered, under := locs.at(toks)
	switch {
	case covered:
		return Redacted
	case under != nil:
		v, _ = under.replaceUnder(v, Redacted)
	}
	return v
}

// payloadID is "<uid>/<resourceVersion>/<rule>", stable for the same
// change. A deletion is "<uid>/deleted/<rule>": a deletion learned from a
// relist or from the restart baseline carries the last resourceVersion seen,
// that of the update before it, and receivers that drop duplicates by id
// must not drop the deletion as a copy of that update. An object is deleted
// once, so the id stays unique and stable.
func payloadID(typ change.Type, ref ObjectRef, rule string) string {
	if typ == change.Deleted {
		return ref.UID + "/deleted/" + rule
	}
	return ref.UID + "/" + ref.ResourceVersion + "/" + rule
}
