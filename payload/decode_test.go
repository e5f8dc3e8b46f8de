package payload_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/payloadtest"
	"github.com/fieldwatch/fieldwatch/payload"
)

// valid is a payload with every part: observed, an actor with its
// attribution, a crd with an impact, both objects.
const valid = `{"id":"u1/42/r","time":"2026-12-02T12:00:00.000001Z","rule":"r","type":"updated","observed":"relist",` +
	`"resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},` +
	`"namespace":"shop","name":"w1","uid":"u1","resourceVersion":"42",` +
	`"changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1},{"op":"add","path":"/spec/x","value":null},` +
	`{"op":"remove","path":"/metadata/annotations/a~1b","oldValue":"<redacted>"}],` +
	`"actor":{"manager":"kubectl-edit","operation":"Update","user":{"username":"admin","uid":"1","groups":["g"]},` +
	`"impersonatedUser":{"username":"alice"},"verb":"update","userAgent":"kubectl","sourceIPs":["::1"],"auditID":"a1","match":"exact"},` +
	`"crd":{"crd":"widgets.example.com","checks":[{"version":"v1","against":"v2","path":"/properties/spec","field":"spec",` +
	`"check":"enum-values-removed","old":["green"],"new":[],"severity":"breaking","message":"m"}],"breaking":1,"unknown":0,"safe":0,"scanned":3,` +
	`"impact":[{"check":"enum-values-removed","version":"v1","path":"/p","field":"spec.color","effect":"rejected","count":1,` +
	`"objects":[{"namespace":"shop","name":"w2","field":"spec.color","error":"bad"}],"message":"m","error":"e"}],"impactError":"limit"},` +
	`"object":{"spec":{"size":3}},"oldObject":{"spec":{"size":1}}}`

// edit returns valid with each pair old, new of pairs replaced; each old
// must be in it once.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	out := valid
	for i := 0; i < len(pairs); i += 2 {
		if strings.Count(out, pairs[i]) != 1 {
			t.Fatalf("%q is not once in the valid payload", pairs[i])
		}
		out = strings.Replace(out, pairs[i], pairs[i+1], 1)
	}
	return out
}

// attribution is the valid payload's actor after manager and operation.
const attribution = `,"user":{"username":"admin","uid":"1","groups":["g"]},"impersonatedUser":{"username":"alice"},` +
	`"verb":"update","userAgent":"kubectl","sourceIPs":["::1"],"auditID":"a1","match":"exact"`

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name, data, err string
	}{
		{"valid", valid, ""},
		{"unknown keys are ignored", edit(t, `"rule":"r",`, `"rule":"r","later":{"a":1},`), ""},
		{"created without oldObject", edit(t, `"type":"updated"`, `"type":"created"`, `,"oldObject":{"spec":{"size":1}}`, ""), ""},
		{"deleted id", edit(t, `"type":"updated"`, `"type":"deleted"`, `"u1/42/r"`, `"u1/deleted/r"`, `"object":{"spec":{"size":3}},`, ""), ""},
		{"no actor", edit(t, `"actor":{"manager":"kubectl-edit","operation":"Update"`+attribution+`},`, ""), ""},
		{"empty changes", edit(t, `"changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1},{"op":"add","path":"/spec/x","value":null},`+
			`{"op":"remove","path":"/metadata/annotations/a~1b","oldValue":"<redacted>"}]`, `"changes":[]`), ""},

		{"not JSON", `{"id":`, "unexpected EOF"},
		{"not an object", `[]`, "cannot unmarshal array"},
		{"data after it", valid + `{}`, "data after the payload"},
		{"no id", edit(t, `"id":"u1/42/r",`, ""), "id: missing"},
		{"id of another change", edit(t, `"u1/42/r"`, `"u1/41/r"`), `id: "u1/41/r", want "u1/42/r"`},
		{"no time", edit(t, `"time":"2026-12-02T12:00:00.000001Z",`, ""), "time: missing"},
		{"time not RFC 3339", edit(t, `"2026-12-02T12:00:00.000001Z"`, `"yesterday"`), "cannot parse"},
		{"no uid", edit(t, `"uid":"u1",`, ""), "uid: missing"},
		{"no resource kind", edit(t, `,"kind":"Widget"`, ""), "resource.kind: missing"},
		{"unknown type", edit(t, `"type":"updated"`, `"type":"patched"`), `type: "patched"`},
		{"changes null", edit(t, `"changes":[`, `"changes":null,"x":[`), "changes: missing or null"},
		{"unknown op", edit(t, `"op":"replace"`, `"op":"move"`), `changes[0]: op: "move"`},
		{"replace without oldValue", edit(t, `,"oldValue":1}`, `}`), "changes[0]: a replace has a value and an oldValue"},
		{"add with oldValue", edit(t, `"value":null}`, `"value":null,"oldValue":1}`), "changes[1]: an add has a value and no oldValue"},
		{"remove with value", edit(t, `"oldValue":"<redacted>"}`, `"oldValue":"<redacted>","value":1}`), "changes[2]: a remove"},
		{"path not a pointer", edit(t, `"/spec/size"`, `"spec.size"`), `changes[0]: path: "spec.size"`},
		{"empty actor", edit(t, `"manager":"kubectl-edit","operation":"Update"`+attribution, ""), "actor: neither"},
		{"crd without name", edit(t, `"crd":"widgets.example.com",`, ""), "crd.crd: missing"},
		{"crd without checks", edit(t, `"checks":[{"version":"v1"`, `"x":[{"version":"v1"`), "crd: checks or impact"},
		{"object in a deletion", edit(t, `"type":"updated"`, `"type":"deleted"`, `"u1/42/r"`, `"u1/deleted/r"`), "object: present in a deleted payload"},
		{"object not an object", edit(t, `"object":{"spec":{"size":3}}`, `"object":null`), "object: not a JSON object"},
		{"count not an integer", edit(t, `"count":1`, `"count":1.5`), "cannot unmarshal number 1.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p payload.Payload
			err := payload.Unmarshal([]byte(tt.data), &p)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Unmarshal: %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Unmarshal: %v, want an error with %q", err, tt.err)
			case err != nil && !strings.HasPrefix(err.Error(), "payload: "):
				t.Errorf("error %q does not say it is about the payload", err)
			}
		})
	}
}

// TestDecoded checks the values of the valid payload as decoded: raw
// values as written, null distinct from absent, the attribution under the
// actor.
func TestDecoded(t *testing.T) {
	var p payload.Payload
	if err := payload.Unmarshal([]byte(valid), &p); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 2, 12, 0, 0, 1000, time.UTC); !p.Time.Equal(want) {
		t.Errorf("time %v, want %v", p.Time, want)
	}
	if p.Type != change.Updated || p.Observed != change.ObservedRelist || p.Resource.APIVersion() != "example.com/v1" {
		t.Errorf("type %q observed %q apiVersion %q", p.Type, p.Observed, p.Resource.APIVersion())
	}
	c := p.Changes
	if len(c) != 3 || string(c[0].Value) != "3" || string(c[0].OldValue) != "1" || string(c[1].Value) != "null" || c[1].OldValue != nil ||
		c[2].Op != payload.OpRemove || c[2].Value != nil || string(c[2].OldValue) != `"`+payload.Redacted+`"` {
		t.Errorf("changes %+v", c)
	}
	if a := p.Actor; a == nil || a.Manager != "kubectl-edit" || a.Match != change.MatchExact || a.Username() != "alice" || a.User.Groups[0] != "g" {
		t.Errorf("actor %+v", p.Actor)
	}
	if d := p.CRD; d == nil || d.Name != "widgets.example.com" || string(d.Checks[0].Old) != `["green"]` || string(d.Checks[0].New) != "[]" ||
		d.Impact[0].Objects[0].Field != "spec.color" || d.ImpactError != "limit" {
		t.Errorf("crd %+v", p.CRD)
	}
	if string(p.Object) != `{"spec":{"size":3}}` {
		t.Errorf("object %s", p.Object)
	}
}

// TestRoundTrip: the valid payload encodes again to the same keys in the
// same order and the same values, and a payload without audit source has
// no attribution keys when encoded again.
func TestRoundTrip(t *testing.T) {
	for _, data := range []string{valid, edit(t, attribution, "")} {
		if _, err := payloadtest.Check([]byte(data)); err != nil {
			t.Error(err)
		}
	}
}

// TestDecoder reads a stream of payloads and, with unknown fields
// disallowed, stops at a key the type does not have.
func TestDecoder(t *testing.T) {
	stream := valid + "\n" + valid + "\n"
	d := payload.NewDecoder(strings.NewReader(stream))
	n := 0
	for {
		var p payload.Payload
		err := d.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 {
		t.Errorf("decoded %d payloads, want 2", n)
	}
	d = payload.NewDecoder(strings.NewReader(edit(t, `"rule":"r",`, `"rule":"r","later":1,`)))
	d.DisallowUnknownFields()
	var p payload.Payload
	if err := d.Decode(&p); err == nil || !strings.Contains(err.Error(), `unknown field "later"`) {
		t.Errorf("Decode with unknown fields disallowed: %v", err)
	}
}

// FuzzUnmarshal: Unmarshal never panics, and what it accepts encodes
// again to a payload it accepts and decodes to the same values.
func FuzzUnmarshal(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte(`{"id":"u/1/r","time":"2026-01-01T00:00:00Z","rule":"r","type":"created","resource":{"version":"v1","resource":"a","kind":"A"},"name":"n","uid":"u","resourceVersion":"1","changes":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p payload.Payload
		if payload.Unmarshal(data, &p) != nil {
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		var q payload.Payload
		if err := payload.Unmarshal(again, &q); err != nil {
			t.Fatalf("Unmarshal of %s: %v", again, err)
		}
		if !p.Time.Equal(q.Time) {
			t.Fatalf("time %v, then %v", p.Time, q.Time)
		}
		p.Time, q.Time = time.Time{}, time.Time{}
		b1, _ := json.Marshal(p)
		b2, _ := json.Marshal(q)
		if !bytes.Equal(b1, b2) {
			t.Fatalf("decoded\n%s\nthen\n%s", b1, b2)
		}
	})
}
