package web

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/testenv/browser"
)

// objectScreenshot, when set, is where TestObjectTimeInBrowser saves a
// screenshot of the diff (docs/history-object-time.png: go test
// ./internal/history/web -run TestObjectTimeInBrowser -object-screenshot
// ../../../docs/history-object-time.png).
var objectScreenshot = flag.String("object-screenshot", "", "save a screenshot of the object page's diff to this PNG file")

// crdScreenshot, when set, is where TestObjectTimeInBrowser saves a
// screenshot of a CRD's schema tree (docs/history-crd-schema.png).
var crdScreenshot = flag.String("crd-screenshot", "", "save a screenshot of a CRD's schema tree to this PNG file")

// seedStates adds to store the states of shop/w1 that seed's entries
// describe: created by alice (size 1, blue), its size set to 3 by alice,
// its color to red by bob.
func seedStates(t *testing.T, store history.Store) {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	obj := func(size int, color string) []byte {
		b, _ := json.Marshal(map[string]any{"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1", "namespace": "shop", "uid": "w1-uid"}, "spec": map[string]any{"size": size, "color": color}})
		return b
	}
	st := func(rv, base string, typ change.Type, at time.Duration, user string, full []byte, ops string) history.State {
		s := history.State{Time: t0.Add(at), Type: typ, Group: "example.com", Version: "v1", Resource: "widgets", Kind: "Widget",
			Namespace: "shop", Name: "w1", UID: "w1-uid", ResourceVersion: rv, Base: base, User: user, Source: history.Delivered, Full: full}
		if ops != "" {
			s.Ops = []byte(ops)
		}
		return s
	}
	_, err := store.(history.StateStore).WriteStates(context.Background(), []history.State{
		st("100", "", change.Created, 0, "alice", obj(1, "blue"), ""),
		st("102", "100", change.Updated, 2*time.Minute, "alice", obj(3, "blue"), `[{"op":"replace","path":"/spec/size","value":3,"oldValue":1}]`),
		st("104", "102", change.Updated, 4*time.Minute, "bob", obj(3, "red"), `[{"op":"replace","path":"/spec/color","value":"red","oldValue":"blue"}]`),
	})
	if err != nil {
		t.Fatal(err)
	}
}

// seedCRDStates adds to store two states of the CRD widgets.example.com
// of seed's CRD entry: as created (spec.color red, blue or green,
// spec.size at most 10, spec.owner), then as dave's update left it
// (green removed, owner removed, shape added, size at most 20).
func seedCRDStates(t *testing.T, store history.Store) {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	crd := func(rv string, props map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "widgets.example.com", "uid": "crd-uid", "resourceVersion": rv},
			"spec": map[string]any{"group": "example.com", "scope": "Namespaced",
				"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{
					"openAPIV3Schema": map[string]any{"type": "object", "properties": map[string]any{
						"spec": map[string]any{"type": "object", "properties": props}}}}}}}})
		return b
	}
	st := func(rv, base string, typ change.Type, at time.Duration, user string, full []byte, ops string) history.State {
		s := history.State{Time: t0.Add(at), Type: typ, Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions",
			Kind: "CustomResourceDefinition", Name: "widgets.example.com", UID: "crd-uid", ResourceVersion: rv, Base: base, User: user,
			Source: history.Delivered, Full: full}
		if ops != "" {
			s.Ops = []byte(ops)
		}
		return s
	}
	const props = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/"
	_, err := store.(history.StateStore).WriteStates(context.Background(), []history.State{
		st("890", "", change.Created, 30*time.Second, "dave", crd("890", map[string]any{
			"color": map[string]any{"type": "string", "enum": []any{"red", "blue", "green"}},
			"size":  map[string]any{"type": "integer", "maximum": 10},
			"owner": map[string]any{"type": "string"}}), ""),
		st("900", "890", change.Updated, 5*time.Minute, "dave", crd("900", map[string]any{
			"color": map[string]any{"type": "string", "enum": []any{"red", "blue"}},
			"size":  map[string]any{"type": "integer", "maximum": 20},
			"shape": map[string]any{"type": "string"}}),
			`[{"op":"replace","path":"`+props+`color/enum","value":["red","blue"]},{"op":"remove","path":"`+props+`owner"},`+
				`{"op":"add","path":"`+props+`shape","value":{"type":"string"}},{"op":"replace","path":"`+props+`size/maximum","value":20}]`),
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestObjectTimeInBrowser drives the object page's time control in
// headless Chromium: an entry's link shows the object as that change
// left it, with who made it; two times show the diff beside the changes
// and users between, and for a CRD its schema as a tree marked with what
// was added, removed, narrowed or loosened; bad input says why; a reader
// of another namespace sees nothing of it.
func TestObjectTimeInBrowser(t *testing.T) {
	store := seed(t, 0)
	seedStates(t, store)
	seedCRDStates(t, store)
	_, base := serve(t, store)
	r := newReaders(t)
	ctx := browser.Start(t)
	tb := tab{t, ctx}
	run, text := tb.run, tb.text

	// The size change's link: the object as it left it, by alice.
	run("open w1's history", chromedp.Navigate(base+"/history/object?uid=w1-uid"), visible("section.states"))
	run("the object after the size change", chromedp.Click(chromedp.CSS(`article.change:nth-of-type(2) p.asof-link a`)), visible("pre.yaml"))
	if y, last := text("pre.yaml"), text("div.state p.last"); !strings.Contains(y, "size: 3") || !strings.Contains(y, "color: blue") ||
		!strings.Contains(y, `resourceVersion: "102"`) || !strings.Contains(last, "alice") {
		t.Errorf("after the size change: %s\n%s", last, y)
	}

	// From before the size change to after the color change.
	run("compare", chromedp.SetValue(chromedp.CSS(`form.asof-diff input[name=from]`), "2026-12-01T09:01:00Z"),
		chromedp.SetValue(chromedp.CSS(`form.asof-diff input[name=to]`), "2026-12-01T09:05:00Z"),
		chromedp.Submit(chromedp.CSS(`form.asof-diff`)), visible("pre.udiff"))
	diff, changes := text("pre.udiff"), text("div.diff-changes")
	for _, want := range []string{"-  color: blue", "+  color: red", "-  size: 1", "+  size: 3"} {
		if !strings.Contains(diff, want) {
			t.Errorf("the diff lacks %q:\n%s", want, diff)
		}
	}
	if !strings.Contains(changes, "2 changes between") || !strings.Contains(changes, "alice") || !strings.Contains(changes, "bob") ||
		!strings.Contains(changes, "replace /spec/color") {
		t.Errorf("the changes between:\n%s", changes)
	}
	if *objectScreenshot != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*objectScreenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The CRD between its creation and dave's update: the schema's tree.
	run("the CRD's schema between", chromedp.Navigate(base+"/history/object?uid=crd-uid&from=2026-12-01T09:01:00Z&to=2026-12-01T09:06:00Z"),
		visible("div.schema-tree"))
	marks := map[string]string{}
	for _, mark := range []string{"added", "removed", "narrowed", "loosened"} {
		marks[mark] = tb.value("the fields marked "+mark,
			`Array.from(document.querySelectorAll("div.schema-tree li.`+mark+` code.field")).map(e => e.textContent).join(",")`)
	}
	if want := map[string]string{"added": "shape", "removed": "owner", "narrowed": "color", "loosened": "size"}; fmt.Sprint(marks) != fmt.Sprint(want) {
		t.Errorf("the fields marked: %v, want %v", marks, want)
	}
	if tree := text("div.schema-tree"); !strings.Contains(tree, `spec.color no longer accepts`) {
		t.Errorf("the schema tree lacks the enum's check:\n%s", tree)
	}
	if *crdScreenshot != "" {
		png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("div.schema-tree")))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*crdScreenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Bad input says why, and the history is still there.
	run("a time before the object", chromedp.Navigate(base+"/history/object?uid=w1-uid&at=2026-11-30T00:00:00Z"), visible("section.states p.error"))
	if e := text("section.states p.error"); !strings.Contains(e, "before the oldest recorded state") || !strings.Contains(text("main"), "spec/color") {
		t.Errorf("a time before the object: %q", e)
	}
	run("a time that does not parse", chromedp.Navigate(base+"/history/object?uid=w1-uid&at=yesterday"), visible("section.states p.error"))
	if e := text("section.states p.error"); !strings.Contains(e, "want an RFC 3339 time") {
		t.Errorf("a time that does not parse: %q", e)
	}

	// The lab reader: no entry of w1, so no time control either.
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + r.lab}}); err != nil {
		t.Fatal(err)
	}
	run("w1 as the lab reader", chromedp.Navigate(base+"/history/object?uid=w1-uid&at=2026-12-01T09:05:00Z"), visible("p.empty"))
	if strings.Contains(text("main"), "size") {
		t.Errorf("the lab reader sees w1: %s", text("main"))
	}
}
