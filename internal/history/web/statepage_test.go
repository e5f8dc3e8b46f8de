package web

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/history"
)

// objectScreenshot, when set, is where TestObjectTimeInBrowser saves a
// screenshot of the diff (docs/history-object-time.png: go test
// ./internal/history/web -run TestObjectTimeInBrowser -object-screenshot
// ../../../docs/history-object-time.png).
var objectScreenshot = flag.String("object-screenshot", "", "save a screenshot of the object page's diff to this PNG file")

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

// TestObjectTimeInBrowser drives the object page's time control in
// headless Chromium: an entry's link shows the object as that change
// left it, with who made it; two times show the diff beside the changes
// and users between; bad input says why; a reader of another namespace
// sees nothing of it.
func TestObjectTimeInBrowser(t *testing.T) {
	store := seed(t, 0)
	seedStates(t, store)
	_, base := serve(t, store)
	r := newReaders(t)
	ctx := browser(t)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	visible := func(sel string) chromedp.Action[chromedp.Void] { return chromedp.WaitVisible(chromedp.CSS(sel)) }

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
