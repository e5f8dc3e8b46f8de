package rules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestRedactEveryMatch: a redact path with [key=value] redacts every list
// item it selects, not only the first.
func TestRedactEveryMatch(t *testing.T) {
	set, err := Parse("f.yaml", []byte(`rules:
  - name: r
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [spec.env]
    includeObject: true
    redact: ['spec.env[name=TOKEN].value']
    actions: [{log: {}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	env := func(gen string) []any {
		return []any{
			map[string]any{"name": "TOKEN", "value": "first-" + gen},
			map[string]any{"name": "OTHER", "value": "plain-" + gen},
			map[string]any{"name": "TOKEN", "value": "second-" + gen},
		}
	}
	obj := func(gen string) map[string]any {
		return map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": gen},
			"spec":     map[string]any{"env": env(gen)}}
	}
	f, errs := set.Eval(&Change{Type: change.Updated, Resource: widgetsV1, Old: obj("1"), New: obj("2"), Time: time.Unix(0, 0)})
	if len(f) != 1 || len(errs) != 0 {
		t.Fatalf("firings %d, errors %v", len(f), errs)
	}
	for _, secret := range []string{"first-1", "first-2", "second-1", "second-2"} {
		if bytes.Contains(f[0].Payload, []byte(secret)) {
			t.Errorf("payload holds %s:\n%s", secret, f[0].Payload)
		}
	}
	if !bytes.Contains(f[0].Payload, []byte("plain-2")) {
		t.Errorf("payload lost what is not redacted:\n%s", f[0].Payload)
	}
}

// fuzzRules cover the shapes of redaction and ignoring: [key=value], [*]
// over lists and maps, [n], quoted keys, whole subtrees, with and without
// fields, with and without includeObject, ignoreFields over and beside
// redacted parts. Every rule matches every resource, Secrets named (a
// wildcard does not cover them); on Secrets the Secret redaction comes on
// top.
const fuzzRules = `rules:
  - name: match-and-data
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    fields: [spec]
    includeObject: true
    redact: ['spec.items[name=a].value', data]
    actions: [{log: {}}]
  - name: every-item
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    redact: ['spec.items[*].value']
    actions: [{log: {}}]
  - name: map-values-ignored-beside
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    includeObject: true
    redact: ['spec.m[*]']
    ignoreFields: ['spec.items[*].seen']
    actions: [{log: {}}]
  - name: index-with-fields-under
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    fields: ['spec.items[*].value', 'spec.items[*].secret.deep']
    redact: ['spec.items[0]', 'spec.items[*].secret']
    actions: [{log: {}}]
  - name: quoted-and-subtree-ignored-over
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    includeObject: true
    redact: ['spec["x.y"]', spec.m, 'spec.items[name=b].secret']
    ignoreFields: ['spec.items[name=b]', 'spec.m.a']
    actions: [{log: {}}]
  - name: secret-only
    match: {resources: [{group: '*', kind: '*'}, {group: '', kind: Secret}]}
    fields: [data, stringData, metadata.annotations]
    includeObject: true
    actions: [{log: {}}]
`

// objGen makes JSON-like objects from fuzz bytes. Every string leaf is a
// unique token (zzv<n>zz) that appears nowhere else, so that a redacted
// one found in a payload is a leak.
type objGen struct {
	b []byte
	i int
	n int
}

func (g *objGen) next() byte {
	if g.i >= len(g.b) {
		return 0
	}
	c := g.b[g.i]
	g.i++
	return c
}

func (g *objGen) leaf() any {
	g.n++
	switch g.next() % 4 {
	case 0:
		return int64(g.n)
	case 1:
		return g.n%2 == 0
	}
	return fmt.Sprintf("zzv%dzz", g.n)
}

var (
	fuzzKeys  = []string{"name", "value", "seen", "secret", "deep", "x.y", "a", "b"}
	fuzzNames = []string{"a", "b", "c"}
)

func (g *objGen) value(depth int) any {
	switch k := g.next() % 6; {
	case depth >= 4 || k < 2:
		return g.leaf()
	case k == 2:
		return g.list(depth)
	default:
		return g.mapOf(depth)
	}
}

func (g *objGen) mapOf(depth int) map[string]any {
	m := map[string]any{}
	for range int(g.next() % 4) {
		m[fuzzKeys[int(g.next())%len(fuzzKeys)]] = g.value(depth + 1)
	}
	return m
}

// list returns items that are mostly maps with a name, as [key=value]
// selects.
func (g *objGen) list(depth int) []any {
	l := make([]any, int(g.next()%4))
	for i := range l {
		if g.next()%4 == 0 {
			l[i] = g.value(depth + 1)
			continue
		}
		item := g.mapOf(depth + 1)
		item["name"] = fuzzNames[int(g.next())%len(fuzzNames)]
		l[i] = item
	}
	return l
}

func (g *objGen) object(rv string) map[string]any {
	spec := g.mapOf(1)
	spec["items"] = g.list(1)
	spec["m"] = g.mapOf(1)
	spec["x.y"] = g.value(2)
	data := map[string]any{}
	for range int(g.next() % 4) {
		data[fuzzKeys[int(g.next())%len(fuzzKeys)]] = g.leaf()
	}
	return map[string]any{
		"apiVersion": "v1", "kind": "Thing",
		"metadata": map[string]any{"name": "o", "namespace": "ns", "uid": "u-1", "resourceVersion": rv,
			"annotations": map[string]any{lastAppliedAnnotation: g.leaf(), "note": g.leaf()}},
		"spec": spec, "data": data, "stringData": g.mapOf(2), "status": g.value(1),
	}
}

// redactedTokens returns the string tokens under every location paths
// select (every [key=value] match) in obj.
func redactedTokens(paths []*fieldPath, obj map[string]any, out map[string]bool) {
	var leaves func(v any)
	leaves = func(v any) {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, "zzv") { // a unique token, not a name
				out[x] = true
			}
		case map[string]any:
			for _, y := range x {
				leaves(y)
			}
		case []any:
			for _, y := range x {
				leaves(y)
			}
		}
	}
	for _, p := range paths {
		p.everyLocation(obj, func(toks []string) {
			if v, ok := valueAt(obj, toks); ok {
				leaves(v)
			}
		})
	}
}

// FuzzRedaction feeds random objects through evaluation with every shape
// of redaction and ignoring, on Secrets and other resources, for each
// change type, and checks that no redacted value appears anywhere in any
// payload.
func FuzzRedaction(f *testing.F) {
	set, err := Parse("fuzz.yaml", []byte(fuzzRules))
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte("seed: a list of named items, maps and leaves"), uint8(0), uint8(1))
	f.Add([]byte{3, 3, 2, 3, 1, 5, 2, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 2, 3, 3, 3, 1, 0, 9, 9, 2}, uint8(1), uint8(0))
	f.Add(bytes.Repeat([]byte{5, 2, 3, 1}, 40), uint8(1), uint8(2))
	resources := []change.Resource{
		secretsResource,
		{Group: "example.com", Version: "v1", Resource: "things", Kind: "Thing", Namespaced: true, Custom: true, Preferred: true},
	}
	f.Fuzz(func(t *testing.T, seed []byte, res, typ uint8) {
		g := &objGen{b: seed}
		c := &Change{Resource: resources[int(res)%len(resources)], Time: time.Unix(0, 0).UTC()}
		switch typ % 3 {
		case 0:
			c.Type, c.New = change.Created, g.object("1")
		case 1:
			c.Type, c.Old, c.New = change.Updated, g.object("1"), g.object("2")
		default:
			c.Type, c.Old = change.Deleted, g.object("1")
		}
		firings, _ := set.Eval(c)
		if c.Type != change.Updated && len(firings) == 0 {
			t.Fatalf("nothing fired on the %s %s", c.Resource.Resource, c.Type)
		}
		for _, fi := range firings {
			if !json.Valid(fi.Payload) {
				t.Fatalf("rule %s: payload is not JSON: %s", fi.Rule.Name, fi.Payload)
			}
			paths := fi.Rule.redact
			if isSecret(c.Resource.Group, c.Resource.Resource) {
				paths = append(append([]*fieldPath(nil), secretRedact...), paths...)
			}
			tokens := map[string]bool{}
			redactedTokens(paths, c.Old, tokens)
			redactedTokens(paths, c.New, tokens)
			for tok := range tokens {
				if bytes.Contains(fi.Payload, []byte(tok)) {
					t.Fatalf("rule %s on %s %s: redacted %s is in the payload:\n%s", fi.Rule.Name, c.Resource.Resource, c.Type, tok, fi.Payload)
				}
			}
		}
	})
}
