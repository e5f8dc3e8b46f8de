package history

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func TestParseQuery(t *testing.T) {
	q, err := ParseQuery(url.Values{
		"resource": {"widgets.example.com"}, "namespace": {"shop"}, "name": {"w1"}, "uid": {"u-1"}, "user": {"alice"},
		"rule": {"resized"}, "type": {"updated"}, "since": {"24h"}, "until": {"2026-12-04T11:00:00Z"}, "cursor": {"123-45"}, "limit": {"5000"},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	if q.Resource != "widgets" || q.Group != "example.com" || !q.GroupSet || q.Namespace != "shop" || q.Name != "w1" || q.UID != "u-1" ||
		q.User != "alice" || q.Rule != "resized" || q.Type != "updated" || !q.Since.Equal(now.Add(-24*time.Hour)) ||
		!q.Until.Equal(now.Add(-time.Hour)) || *q.After != (Cursor{Time: 123, Seq: 45}) || q.Limit != MaxLimit {
		t.Errorf("%+v", q)
	}
	// Values reads back as the same query.
	again, err := ParseQuery(q.Values(), now)
	if err != nil || again.Resource != q.Resource || !again.Since.Equal(q.Since) || *again.After != *q.After || again.Limit != q.Limit {
		t.Errorf("round trip: %+v, %v", again, err)
	}
	if q, err := ParseQuery(url.Values{"resource": {"configmaps"}}, now); err != nil || q.Resource != "configmaps" || q.GroupSet || q.Limit != DefaultLimit {
		t.Errorf("resource without a group: %+v, %v", q, err)
	}
}

// TestParseQueryBadInput: every parameter is validated, and the error
// says what it takes.
func TestParseQueryBadInput(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  string
	}{
		{"color=red", `unknown parameter "color": the parameters are resource, namespace`},
		{"namespace=a&namespace=b", `parameter "namespace" given 2 times`},
		{"namespace=", `parameter "namespace" is empty`},
		{"name=" + strings.Repeat("x", 2000), `parameter "name" is 2000 bytes long: 1024 at most`},
		{"user=a%00b", `parameter "user" holds control characters`},
		{"rule=%ff", `parameter "rule" holds control characters or invalid UTF-8`},
		{"type=patched", `parameter "type" "patched": want created, updated or deleted`},
		{"since=yesterday", `parameter "since" "yesterday": want a time (RFC 3339`},
		{"until=-5m", `parameter "until" "-5m": want a time`},
		{"since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z", `parameter "until" (2026-12-01T00:00:00Z) is not after "since"`},
		{"cursor=abc", `parameter "cursor": cursor "abc": not a cursor this API returned`},
		{"cursor=1-2-3", `not a cursor this API returned`},
		{"limit=0", `parameter "limit" "0": want entries per page, 1 to 1000`},
		{"limit=ten", `parameter "limit" "ten"`},
		{"resource=.example.com", `parameter "resource" ".example.com": want a resource's plural name`},
		{"resource=widgets.", `parameter "resource" "widgets."`},
		{"resource=a/b", `parameter "resource" "a/b"`},
	} {
		v, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseQuery(v, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.query, err, tc.want)
		}
	}
}

func TestParsePayload(t *testing.T) {
	f := fixture{uid: "u", rv: "9", rule: "r", namespace: "ns", name: "n", user: "admin", imp: "alice", manager: "kubectl", time: t0,
		changes: `[{"op":"add","path":"/x","value":{"actor":{"user":{"username":"mallory"}},"id":"fake"}}]`}
	e, err := ParsePayload(f.payload(), Delivered)
	if err != nil {
		t.Fatal(err)
	}
	// Keys inside values (a change whose value has an "actor") are not
	// the payload's.
	if e.ID != "u/9/r" || e.User != "admin" || e.Impersonated != "alice" || e.Who() != "alice" || e.Manager != "kubectl" || !e.Time.Equal(t0) {
		t.Errorf("%+v", e)
	}
	// The actor's shapes: absent, null, without users, with null users,
	// keys of other objects inside it ignored.
	const head = `{"id":"x","time":"2026-12-01T00:00:00Z","rule":"r","type":"updated","uid":"u"`
	for actor, want := range map[string][3]string{
		``:                         {},
		`,"actor":null`:            {},
		`,"actor":{"manager":"m"}`: {"m"},
		`,"actor":{"manager":"m","user":null,"impersonatedUser":null}`:                            {"m"},
		`,"actor":{"user":{"uid":"1","username":"bob","groups":["a"]},"match":"exact"}`:           {"", "bob"},
		`,"actor":{"impersonatedUser":{"username":"al\u0069ce"},"candidates":[{"username":"x"}]}`: {"", "", "alice"},
	} {
		e, err := ParsePayload([]byte(head+actor+"}"), Delivered)
		if err != nil {
			t.Errorf("actor %s: %v", actor, err)
		} else if got := [3]string{e.Manager, e.User, e.Impersonated}; got != want {
			t.Errorf("actor %s: manager, user, impersonated %q, want %q", actor, got, want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"id":"x"`, `{"id":"x","time":"2026-12-01T00:00:00Z","rule":"r","type":"updated","uid":"u","actor":{"user":"bob"}}`,
		`{"id":"x","time":"2026-12-01T00:00:00Z","rule":"r","type":"updated","uid":"u","actor":{"manager":1}}`, `{"id":"x","time":"2026-12-01T00:00:00Z","rule":"r","type":"updated","uid":"u"} x`,
		`{"id":"x","time":"yesterday","rule":"r","type":"updated","uid":"u"}`, `{"id":"x","time":"2026-12-01T00:00:00Z","rule":"r","type":"moved","uid":"u"}`,
		`{"id":1}`, `{"time":"2026-12-01T00:00:00Z","rule":"r","type":"updated","uid":"u"}`,
		`{"id":"x","time":"2300-01-01T00:00:00Z","rule":"r","type":"updated","uid":"u"}`, `{"id":"x","time":"1600-01-01T00:00:00Z","rule":"r","type":"updated","uid":"u"}`} {
		if _, err := ParsePayload([]byte(bad), Delivered); err == nil {
			t.Errorf("ParsePayload(%q): no error", bad)
		}
	}
}

// FuzzParsePayload: any input is an entry or an error, never a panic;
// an entry's fields are what encoding/json reads from the same input.
func FuzzParsePayload(f *testing.F) {
	f.Add(fixture{uid: "u", rv: "1", namespace: "ns", name: "n", user: "a", manager: "m", time: t0}.payload())
	f.Add([]byte(`{"id":"a\"b","time":"2026-12-01T00:00:00Z","rule":"r","type":"deleted","uid":"u","x":[{"y":"}]"}]}`))
	f.Add([]byte(`{"a\u0069d":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := ParsePayload(data, Delivered)
		if err != nil {
			return
		}
		if e.ID == "" || e.UID == "" || e.Rule == "" {
			t.Errorf("entry without id, uid or rule: %+v", e)
		}
	})
}
