package rules

import (
	"bytes"
	"encoding/json"
)

// Redacted replaces redacted values in payloads.
const Redacted = "<redacted>"

// TimeFormat is the payload's time format: RFC 3339 in UTC with
// microseconds.
const TimeFormat = "2006-01-02T15:04:05.000000Z"

// secretRedact are the paths redacted in every Secret (core group,
// resource secrets): the values of data and stringData, keys kept.
var secretRedact = []*fieldPath{mustCompilePath("data[*]"), mustCompilePath("stringData[*]")}

func mustCompilePath(s string) *fieldPath {
	p, err := compilePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// payload is the JSON payload of a firing (DESIGN.md, "Payload"), fields
// in the contract's order.
type payload struct {
	ID              string          `json:"id"`
	Time            string          `json:"time"`
	Rule            string          `json:"rule"`
	Type            ChangeType      `json:"type"`
	Resource        payloadResource `json:"resource"`
	Namespace       string          `json:"namespace"`
	Name            string          `json:"name"`
	UID             string          `json:"uid"`
	ResourceVersion string          `json:"resourceVersion"`
	Changes         []Op            `json:"changes"`
	Actor           *Actor          `json:"actor,omitempty"`
	Object          map[string]any  `json:"object,omitempty"`
	OldObject       map[string]any  `json:"oldObject,omitempty"`
}

type payloadResource struct {
	Group    string `json:"group"`
	Version  string `json:"version"`
	Resource string `json:"resource"`
	Kind     string `json:"kind"`
}

// firing builds the firing of r on st.c with changes ops. It never changes
// the change's maps: redaction copies what it rewrites.
func (r *Rule) firing(st *evalState, ops []Op) (Firing, error) {
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
	p := payload{
		ID:              ref.UID + "/" + ref.ResourceVersion + "/" + r.Name,
		Time:            c.Time.UTC().Format(TimeFormat),
		Rule:            r.Name,
		Type:            c.Type,
		Resource:        payloadResource{ref.Group, ref.Version, ref.Resource, ref.Kind},
		Namespace:       ref.Namespace,
		Name:            ref.Name,
		UID:             ref.UID,
		ResourceVersion: ref.ResourceVersion,
		Changes:         ops,
	}
	if c.Type != Deleted {
		p.Actor = actorOf(c.Object, ops)
	}
	redact := r.redact
	if c.Resource.Group == "" && c.Resource.Resource == "secrets" {
		redact = append(append([]*fieldPath(nil), secretRedact...), redact...)
	}
	oldLocs, newLocs := redactLocations(redact, c.OldObject), redactLocations(redact, c.Object)
	p.Changes = make([]Op, len(ops))
	for i, o := range ops {
		o.Path = pointer(o.toks)
		o.Value = redactValue(o.toks, o.Value, newLocs)
		o.OldValue = redactValue(o.toks, o.OldValue, oldLocs)
		p.Changes[i] = o
	}
	if r.IncludeObject {
		if c.Object != nil {
			p.Object = redactValue(nil, c.Object, newLocs).(map[string]any)
		}
		if c.OldObject != nil {
			p.OldObject = redactValue(nil, c.OldObject, oldLocs).(map[string]any)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&p); err != nil {
		return Firing{}, err
	}
	return Firing{ID: p.ID, Rule: r, Payload: bytes.TrimSuffix(buf.Bytes(), []byte("\n")), Object: ref}, nil
}

// redactLocations returns the locations paths select in obj.
func redactLocations(paths []*fieldPath, obj map[string]any) [][]string {
	if obj == nil || len(paths) == 0 {
		return nil
	}
	var locs [][]string
	for _, p := range paths {
		p.locations(obj, func(toks []string) {
			if _, ok := valueAt(obj, toks); ok {
				locs = append(locs, toks)
			}
		})
	}
	return locs
}

// redactValue returns v, the value at toks, with every location in locs at
// or below toks replaced by Redacted (copying, never changing, v).
func redactValue(toks []string, v any, locs [][]string) any {
	for _, loc := range locs {
		switch {
		case hasPrefix(toks, loc):
			return Redacted
		case hasPrefix(loc, toks):
			v = rewriteAt(v, loc[len(toks):], func(any) any { return Redacted })
		}
	}
	return v
}
