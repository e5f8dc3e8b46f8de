package action

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

// sdkReceiver starts a CloudEvents receiver built with the SDK on
// 127.0.0.1 and returns its URL and the events it decodes.
func sdkReceiver(t *testing.T) (string, <-chan cloudevents.Event) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, err := cloudevents.NewClientHTTP(cehttp.WithListener(ln))
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan cloudevents.Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = c.StartReceiver(ctx, func(e cloudevents.Event) {
			events <- e
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})
	return "http://" + ln.Addr().String() + "/", events
}

// TestWebhookCloudEvents: a receiver built with the CloudEvents SDK decodes
// what the webhook sends in structured and binary mode, with every
// attribute as documented and the payload as the data.
func TestWebhookCloudEvents(t *testing.T) {
	tests := []struct {
		name       string
		ce         rules.CloudEvents
		wantType   func(r *rules.Rule) string
		wantSource string
	}{
		{"structured", rules.CloudEvents{}, func(*rules.Rule) string { return "io.fieldwatch.updated" }, "/fieldwatch/apis/example.com/v1/widgets"},
		{"binary", rules.CloudEvents{Mode: "binary"}, func(*rules.Rule) string { return "io.fieldwatch.updated" }, "/fieldwatch/apis/example.com/v1/widgets"},
		{"structured by rule", rules.CloudEvents{Type: "rule", Source: "//prod-eu-1/"}, func(r *rules.Rule) string { return r.Name }, "//prod-eu-1/apis/example.com/v1/widgets"},
		{"binary by rule", rules.CloudEvents{Mode: "binary", Type: "rule", Source: "https://k8s.example.com/clusters/a"}, func(r *rules.Rule) string { return r.Name }, "https://k8s.example.com/clusters/a/apis/example.com/v1/widgets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url, events := sdkReceiver(t)
			h := newHarness(t, nil)
			ce := tt.ce
			r := webhookRule("ce-"+tt.name[:4], &rules.WebhookAction{URL: url, CloudEvents: &ce, Retry: fastRetry})
			f := newFiring(r)
			h.deliver(t, f, nil)
			var e cloudevents.Event
			select {
			case e = <-events:
			case <-time.After(10 * time.Second):
				t.Fatalf("the SDK receiver got no event; logs:\n%s", h.logs.String())
			}
			if err := e.Validate(); err != nil {
				t.Errorf("event does not validate: %v", err)
			}
			checkEvent(t, e, f, tt.wantType(r), tt.wantSource)
		})
	}
}

// checkEvent checks the attributes and data of the event of f.
func checkEvent(t *testing.T, e cloudevents.Event, f rules.Firing, wantType, wantSource string) {
	t.Helper()
	wantTime, _ := time.Parse(time.RFC3339Nano, "2026-12-02T12:00:00.000000Z")
	for _, c := range []struct{ attr, got, want string }{
		{"specversion", e.SpecVersion(), "1.0"},
		{"id", e.ID(), f.ID},
		{"type", e.Type(), wantType},
		{"source", e.Source(), wantSource},
		{"subject", e.Subject(), "default/" + f.Object.Name},
		{"datacontenttype", e.DataContentType(), "application/json"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.attr, c.got, c.want)
		}
	}
	if !e.Time().Equal(wantTime) {
		t.Errorf("time = %v, want %v", e.Time(), wantTime)
	}
	var got, want any
	if err := json.Unmarshal(e.Data(), &got); err != nil {
		t.Fatalf("data %q: %v", e.Data(), err)
	}
	_ = json.Unmarshal(f.Payload, &want)
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("data = %s, want the payload %s", gb, wb)
	}
}

// TestCloudEventsAttrs covers the attributes the event of a firing gets
// for objects of the core group and cluster-scoped ones, and the header
// escaping of the binary mode.
func TestCloudEventsAttrs(t *testing.T) {
	r := &rules.Rule{Name: "r"}
	tests := []struct {
		name                string
		obj                 rules.ObjectRef
		wantSource, wantSub string
	}{
		{"core namespaced", rules.ObjectRef{Version: "v1", Resource: "configmaps", Namespace: "ns", Name: "c"}, "/fieldwatch/api/v1/configmaps", "ns/c"},
		{"cluster-scoped", rules.ObjectRef{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions", Name: "widgets.example.com"}, "/fieldwatch/apis/apiextensions.k8s.io/v1/customresourcedefinitions", "widgets.example.com"},
	}
	c := newCloudEvents(&rules.CloudEvents{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := rules.Firing{ID: "u/1/r", Rule: r, Object: tt.obj, Type: change.Deleted, Time: time.Date(2026, 12, 2, 12, 0, 0, 1000, time.UTC)}
			a := c.attrs(&f)
			if a.source != tt.wantSource || a.subject != tt.wantSub || a.typ != "io.fieldwatch.deleted" || a.time != "2026-12-02T12:00:00.000001Z" || a.id != "u/1/r" {
				t.Errorf("attrs = %+v", a)
			}
		})
	}
	if a := c.attrs(&rules.Firing{ID: "u/1/r", Type: change.Created}); a.time != "" || a.typ != "io.fieldwatch.created" {
		t.Errorf("attrs of a firing without a time = %+v", a)
	}
	for in, want := range map[string]string{"plain/1": "plain/1", "a b": "a%20b", `"%`: "%22%25", "é": "%C3%A9"} {
		if got := headerValue(in); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", in, got, want)
		}
	}
}
