package history

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/cases"
	"github.com/fieldwatch/fieldwatch/payload"
	"github.com/fieldwatch/fieldwatch/rules"
)

// TestParsePayloadMatchesType: ParsePayload, which scans a payload's
// top-level keys by hand, reads what decoding into payload.Payload reads,
// for every payload of the rules' golden cases and for payloads whose
// strings need unescaping or whose actor is null.
func TestParsePayloadMatchesType(t *testing.T) {
	set, err := rules.Load("../../rules/testdata/golden/rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := cases.Load("../../rules/testdata/golden/cases.yaml", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var payloads [][]byte
	for _, res := range cases.Run(set, cs) {
		for _, f := range res.Firings {
			payloads = append(payloads, f)
		}
	}
	payloads = append(payloads,
		[]byte(`{"id":"u/1/r\u00e9","time":"2026-12-02T12:00:00.000001Z","rule":"r\u00e9","type":"updated","resource":{"group":"","version":"v1","resource":"configmaps","kind":"ConfigMap"},`+
			`"namespace":"a\"b","name":"\u003cn\u003e","uid":"u","resourceVersion":"1","changes":[],"actor":{"manager":"m\\n","operation":"Update","user":{"username":"al\u00efce"},"impersonatedUser":{"username":"b\tob"},"match":"exact"}}`),
		[]byte(`{"id":"u/deleted/r","time":"2026-12-02T12:00:00.000000Z","rule":"r","type":"deleted","resource":{"group":"g","version":"v1","resource":"rs","kind":"R"},`+
			`"namespace":"","name":"n","uid":"u","resourceVersion":"1","changes":[],"actor":null}`),
	)
	if len(payloads) < 20 {
		t.Fatalf("only %d payloads: the golden cases did not load as expected", len(payloads))
	}
	for _, data := range payloads {
		var p payload.Payload
		if err := json.Unmarshal(data, &p); err != nil {
			t.Fatalf("%s: %v", data, err)
		}
		got, err := ParsePayload(data, Delivered)
		if err != nil {
			t.Errorf("ParsePayload(%s): %v", data, err)
			continue
		}
		want := Entry{ID: p.ID, Time: p.Time, Rule: p.Rule, Type: p.Type,
			Group: p.Resource.Group, Version: p.Resource.Version, Resource: p.Resource.Resource, Kind: p.Resource.Kind,
			Namespace: p.Namespace, Name: p.Name, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Source: Delivered, Payload: data}
		if a := p.Actor; a != nil {
			want.Manager, want.User, want.Impersonated = a.Manager, username(a.User), username(a.ImpersonatedUser)
		}
		if !got.Time.Equal(want.Time) {
			t.Errorf("%s: time %v, decoded %v", data, got.Time, want.Time)
		}
		got.Time, want.Time = time.Time{}, time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ParsePayload\n%+v\ndecoded\n%+v", got, want)
		}
	}
}

func username(u *change.UserInfo) string {
	if u == nil {
		return ""
	}
	return u.Username
}
