package rules

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// TestPayloadShape checks the payload contract independently of the golden
// files: keys and their order, the id, the time format.
func TestPayloadShape(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(match+"    includeObject: true\n"+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	old := obj(t, `{"metadata":{"name":"w","namespace":"ns","uid":"u","resourceVersion":"1","managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:00Z"}]},"spec":{"size":1}}`)
	new := obj(t, `{"metadata":{"name":"w","namespace":"ns","uid":"u","resourceVersion":"2","managedFields":[{"manager":"m","operation":"Update","time":"2026-01-01T00:00:01Z"}]},"spec":{"size":2}}`)
	c := &Change{Type: change.Updated, Resource: widgetsV1, New: new, Old: old, Time: time.Date(2026, 12, 2, 13, 0, 0, 5000, time.FixedZone("x", 3600))}
	firings, errs := set.Eval(c)
	if len(firings) != 1 || len(errs) != 0 {
		t.Fatalf("Eval = %v, %v", firings, errs)
	}
	f := firings[0]
	if f.ID != "u/2/r" || f.Rule != set.Rule("r") {
		t.Errorf("firing = %+v", f)
	}
	wantRef := ObjectRef{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespace: "ns", Name: "w", UID: "u", ResourceVersion: "2"}
	if f.Object != wantRef {
		t.Errorf("object ref = %+v", f.Object)
	}
	keys := topKeys(t, f.Payload)
	want := []string{"id", "time", "rule", "type", "resource", "namespace", "name", "uid", "resourceVersion", "changes", "actor", "object", "oldObject"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("payload keys = %v, want %v", keys, want)
	}
	var p map[string]any
	if err := json.Unmarshal(f.Payload, &p); err != nil {
		t.Fatal(err)
	}
	if p["time"] != "2026-12-02T12:00:00.000005Z" || p["id"] != "u/2/r" || p["type"] != "updated" {
		t.Errorf("payload = %s", f.Payload)
	}
}

// topKeys returns the keys of a payload, in order.
func topKeys(t *testing.T, payload []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(payload))
	var keys []string
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			continue
		case json.Delim('}'), json.Delim(']'):
			depth--
			continue
		}
		if s, ok := tok.(string); ok && depth == 1 && dec.More() {
			keys = append(keys, s)
			// skip the value
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
		}
	}
	return keys
}

func TestEvalBadChanges(t *testing.T) {
	set, err := Parse("f.yaml", []byte(rule(match+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	o := obj(t, `{"metadata":{"name":"w"}}`)
	for _, c := range []*Change{
		{Type: "moved", Resource: widgetsV1, New: o, Old: o},
		{Type: change.Created, Resource: widgetsV1},
		{Type: change.Updated, Resource: widgetsV1, New: o},
		{Type: change.Deleted, Resource: widgetsV1, New: o},
	} {
		if f, errs := set.Eval(c); len(f) != 0 || len(errs) != 1 {
			t.Errorf("Eval(%s) = %v, %v; want one error", c.Type, f, errs)
		}
	}
	// A resource no rule watches is not even checked.
	if f, errs := set.Eval(&Change{Type: "moved", Resource: pods}); f != nil || errs != nil {
		t.Errorf("Eval of an unwatched resource = %v, %v", f, errs)
	}
}
