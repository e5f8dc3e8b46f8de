package action_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/fieldwatch/fieldwatch/action"
	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/rules"
)

// widgetResized is a change that fires the rules of the examples below.
func widgetResized() *rules.Change {
	widget := func(rv string, size int) map[string]any {
		return map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1", "namespace": "shop", "uid": "6a1f", "resourceVersion": rv},
			"spec":     map[string]any{"size": int64(size)},
		}
	}
	return &rules.Change{
		Type:     change.Updated,
		Resource: change.Resource{Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget", Namespaced: true, Preferred: true},
		Old:      widget("4710", 1),
		New:      widget("4711", 3),
		Time:     time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC),
	}
}

// A Dispatcher runs the actions of each firing; Close drains the queues.
// Here the log action writes the payload to standard output.
func Example() {
	set, err := rules.Parse("rules.yaml", []byte(`
rules:
  - name: widget-resized
    match: {resources: [{group: example.com, kind: Widget}]}
    fields: [{path: spec.size}]
    actions: [{log: {}}]
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := action.New(action.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	firings, _ := set.Eval(widgetResized())
	for _, f := range firings {
		if err := d.Deliver(ctx, f, func() { fmt.Println("handled", f.ID) }); err != nil {
			fmt.Println(err)
		}
	}
	if err := d.Close(ctx); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"id":"6a1f/4711/widget-resized","time":"2026-12-02T12:00:00.000000Z","rule":"widget-resized","type":"updated","resource":{"group":"example.com","version":"v1","resource":"widgets","kind":"Widget"},"namespace":"shop","name":"w1","uid":"6a1f","resourceVersion":"4711","changes":[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}]}
	// handled 6a1f/4711/widget-resized
}

// A Go receiver of the webhook action checks the signature of each request
// with VerifySignature, and drops duplicates by its Idempotency-Key.
func ExampleVerifySignature() {
	dir, err := os.MkdirTemp("", "fieldwatch-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	secret := []byte("s3cret")
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		fmt.Println(err)
		return
	}

	got := make(chan string, 1)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := action.VerifySignature(secret, r.Header.Get(action.TimestampHeader),
			r.Header.Get(rules.DefaultSignatureHeader), body, 5*time.Minute, time.Now())
		got <- fmt.Sprintf("%s: signature error %v", r.Header.Get("Idempotency-Key"), err)
	}))
	defer receiver.Close()

	set, err := rules.Parse("rules.yaml", fmt.Appendf(nil, `
rules:
  - name: widget-resized
    match: {resources: [{group: example.com, kind: Widget}]}
    actions: [{webhook: {url: %q, signing: {secretFile: %q}}}]
`, receiver.URL, secretFile))
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := action.New(action.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	firings, _ := set.Eval(widgetResized())
	for _, f := range firings {
		_ = d.Deliver(ctx, f, nil)
	}
	fmt.Println(<-got)
	_ = d.Close(ctx)
	// Output:
	// 6a1f/4711/widget-resized: signature error <nil>
}

// Sign computes the signature header a webhook request carries.
func ExampleSign() {
	fmt.Println(action.Sign([]byte("s3cret"), "1764676800", []byte(`{"id":"6a1f/4711/widget-resized"}`)))
	// Output:
	// sha256=0c39875aecaa253fcf0b44a276d190a586f14c4713b30d610ac24477f4401eac
}
