package payloadtest

import (
	"slices"
	"strings"
	"testing"
)

// full uses every key of payload.Payload.
const full = `{"id":"u1/42/r","time":"2026-12-02T12:00:00.000001Z","rule":"r","type":"updated","observed":"relist","cluster":"prod-eu",` +
	`"resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},` +
	`"namespace":"shop","name":"w1","uid":"u1","resourceVersion":"42",` +
	`"changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1.50}],` +
	`"actor":{"manager":"kubectl-edit","operation":"Update","user":{"username":"admin","uid":"1","groups":["g"],"extra":{"k":["v"]}},` +
	`"impersonatedUser":{"username":"alice","uid":"2","groups":["h"],"extra":{"k":["v"]}},"verb":"update","userAgent":"kubectl","sourceIPs":["::1"],"auditID":"a1","source":"audit","match":"ambiguous","candidates":["a","b"]},` +
	`"guard":{"overridden":true,"reason":"migrated","user":"alice","groups":["g"],"operation":"UPDATE","requestUID":"r1","checks":["enum-values-removed"],"objects":1},` +
	`"crd":{"crd":"widgets.example.com","checks":[{"version":"v1","against":"v2","path":"/properties/spec","field":"spec",` +
	`"check":"enum-values-removed","old":["green"],"new":[],"severity":"breaking","message":"m"}],"breaking":1,"unknown":0,"safe":0,"scanned":3,` +
	`"impact":[{"check":"enum-values-removed","version":"v1","path":"/p","field":"spec.color","effect":"rejected","count":1,` +
	`"objects":[{"namespace":"shop","name":"w2","field":"spec.color","error":"<bad> & \u2028"}],"message":"m","error":"e","hidden":2}],"impactError":"limit"},` +
	`"object":{"spec":{"size":3}},"oldObject":{"spec":{"size":1.50}}}`

func TestCheck(t *testing.T) {
	tests := []struct {
		name, old, new, err string
	}{
		{"as written", "", "", ""},
		{"keys out of order", `"rule":"r","type":"updated"`, `"type":"updated","rule":"r"`, `at type: key "type", encoded again rule`},
		{"actor keys out of order", `"auditID":"a1","source":"audit","match":"ambiguous"`, `"match":"ambiguous","auditID":"a1","source":"audit"`, `at actor.match: key "match", encoded again auditID`},
		{"time not in TimeFormat", `12:00:00.000001Z`, `13:00:00.000001+01:00`, "not in payload.TimeFormat"},
		{"an unknown key", `"rule":"r",`, `"rule":"r","x":1,`, `unknown field "x"`},
		{"an unknown key in a part", `"effect":"rejected"`, `"effect":"rejected","x":1`, `unknown field "x"`},
		{"a key twice", `"safe":0,`, `"safe":0,"breaking":1,`, `at crd.breaking: key "breaking"`},
		{"data after it", `"size":1.50}}}`, `"size":1.50}}}{}`, "data after the payload"},
		{"invalid", `"op":"replace"`, `"op":"copy"`, `op: "copy"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := full
			if tt.old != "" {
				if strings.Count(full, tt.old) != 1 {
					t.Fatalf("%q is not once in the payload", tt.old)
				}
				data = strings.Replace(full, tt.old, tt.new, 1)
			}
			_, err := Check([]byte(data))
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("Check: %v, want an error with %q", err, tt.err)
			}
		})
	}
}

// TestPaths: the payload above uses every key the type has, and KeyPaths
// finds them, not entering raw values; a key the type lacks is listed.
func TestPaths(t *testing.T) {
	want := slices.Sorted(slices.Values(Paths()))
	got, err := KeyPaths([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("KeyPaths\n%v\nPaths\n%v", got, want)
	}
	for _, p := range []string{"actor.user.username", "changes[].oldValue", "crd.impact[].objects[].error", "object"} {
		if !slices.Contains(want, p) {
			t.Errorf("Paths has no %s", p)
		}
	}
	got, err = KeyPaths([]byte(strings.Replace(full, `"rule":"r",`, `"rule":"r","later":{"a":1},`, 1)))
	if err != nil || !slices.Contains(got, "later") || slices.Contains(got, "later.a") {
		t.Errorf("KeyPaths with a key the type lacks: %v, %v", got, err)
	}
}
