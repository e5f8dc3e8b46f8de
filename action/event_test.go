package action

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestEventName(t *testing.T) {
	for _, name := range []string{
		"w1", "system:controller:job-controller", "UPPER_case", "..", "-a-", "a..b", "kube-root-ca.crt",
		strings.Repeat("x", 300), "ü", "",
	} {
		got := eventName(name, "uid/1/rule", 0)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("eventName(%q) = %q: %v", name, got, errs)
		}
	}
	if eventName("w", "id", 0) == eventName("w", "id", 1) {
		t.Error("two actions of one firing share an event name")
	}
	if a, b := eventName("w", "id", 0), eventName("w", "id", 0); a != b {
		t.Error("event name not stable")
	}
}

func TestSummary(t *testing.T) {
	cases := []struct {
		payload, want string
	}{
		{`{"rule":"r","type":"updated","changes":[{"op":"replace","path":"/spec/size","value":2,"oldValue":1},{"op":"add","path":"/spec/color","value":"red"}]}`,
			`r: updated /spec/size: 1 -> 2, /spec/color: <none> -> "red"`},
		{`{"rule":"r","type":"created","resource":{"kind":"Widget"},"namespace":"default","name":"w1"}`, "r: created Widget default/w1"},
		{`{"rule":"r","type":"deleted","resource":{"kind":"Node"},"name":"n1"}`, "r: deleted Node n1"},
		{`not json`, "fieldwatch: unreadable payload"},
	}
	for _, tc := range cases {
		if got := summary([]byte(tc.payload)); got != tc.want {
			t.Errorf("summary(%s) = %q, want %q", tc.payload, got, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	got := truncate(long, maxNoteBytes, "...")
	if len(got) > maxNoteBytes || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
		t.Errorf("truncate: %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if truncate("short", 10, "...") != "short" {
		t.Error("truncate cut a short string")
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"5", "Wed, 02 Dec 2026 12:00:30 GMT", "", "-1", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if d := parseRetryAfter(s, now); d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %s", s, d)
		}
	})
}
