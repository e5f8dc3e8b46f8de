package web

import (
	"context"
	"flag"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/internal/testenv/browser"
)

// screenshot, when set, is where TestPageInBrowser saves a screenshot of
// the timeline (docs/history-timeline.png: go test ./internal/history/web
// -run TestPageInBrowser -screenshot ../../../docs/history-timeline.png).
var screenshot = flag.String("screenshot", "", "save a screenshot of the timeline to this PNG file")

// requests records every URL the page asks for.
type requests struct {
	mu   sync.Mutex
	urls []string
}

func (r *requests) listen(ctx context.Context) error {
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		return err
	}
	return chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			r.mu.Lock()
			r.urls = append(r.urls, e.Request.URL)
			r.mu.Unlock()
		}
	})
}

func (r *requests) outside(base string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, u := range r.urls {
		if !strings.HasPrefix(u, base+"/") {
			out = append(out, u)
		}
	}
	return out
}

// tab drives a test's headless Chromium tab: a step that fails ends the
// test, saying what it was.
type tab struct {
	t   *testing.T
	ctx context.Context
}

// run does steps.
func (b tab) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// value is what the script js evaluates to, a string.
func (b tab) value(what string, js string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// count is how many elements sel selects.
func (b tab) count(sel string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+jsString(sel)+`).length`))
	if err != nil {
		b.t.Fatalf("count %s: %v", sel, err)
	}
	return n
}

// text is the text of the first element sel selects.
func (b tab) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// visible waits until sel selects a visible element.
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}

// TestPageInBrowser drives the pages in headless Chromium: the timeline
// loads (nothing from elsewhere), the filters narrow it, the keyboard
// moves through the entries and opens one, an object's history shows
// each change's old and new values and who made it, a CRD change its
// checks and the objects hit; a user who may read one namespace sees
// nothing of the others.
func TestPageInBrowser(t *testing.T) {
	_, base := serve(t, seed(t, 3000))
	r := newReaders(t)
	ctx := browser.Start(t)
	var reqs requests
	if err := reqs.listen(ctx); err != nil {
		t.Fatal(err)
	}
	tb := tab{t, ctx}
	run, value, count, text := tb.run, tb.value, tb.count, tb.text
	// at waits until the page's address has part in it (a form's
	// submission navigates after Submit returns).
	at := func(part string) {
		t.Helper()
		if !testenv.Poll(30*time.Second, func() bool { return strings.Contains(value("the location", `location.href`), part) }) {
			t.Fatalf("the page did not go to %q: it is at %s", part, value("the location", `location.href`))
		}
		run("load "+part, visible("footer.foot"))
	}

	// The timeline, as loopback (everything): a page of 100 entries, the
	// newest first, with the CRD change on top.
	run("open the timeline", chromedp.Navigate(base+"/history"), visible("table.timeline"))
	if n := count("tr.entry"); n != 100 {
		t.Errorf("%d entries on the first page, want 100", n)
	}
	first := text("tr.entry")
	if !strings.Contains(first, "widgets.example.com") || !strings.Contains(first, "1 breaking") || !strings.Contains(first, "2 objects hit") {
		t.Errorf("the newest entry: %q, want the CRD change with 1 breaking check and 2 objects hit", first)
	}
	if *screenshot != "" {
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Filters narrow the list: namespace shop, then type created.
	run("filter by namespace", chromedp.SetValue(chromedp.CSS(`input[name=namespace]`), "shop"), chromedp.Submit(chromedp.CSS(`form.filters`)))
	at("namespace=shop")
	if n := count("tr.entry"); n != 3 || !strings.Contains(text("table.timeline"), "shop/w1") || strings.Contains(text("table.timeline"), "lab/") {
		t.Errorf("namespace shop: %d entries: %q", n, text("table.timeline"))
	}
	run("filter by type", chromedp.SetValue(chromedp.CSS(`select[name=type]`), "created"), chromedp.Submit(chromedp.CSS(`form.filters`)))
	at("type=created")
	if n := count("tr.entry"); n != 1 || !strings.Contains(text("tr.entry"), "alice") {
		t.Errorf("namespace shop, created: %d entries: %q", n, text("table.timeline"))
	}

	// The keyboard: / focuses the filters; j selects the first entry and
	// Enter opens its object's history.
	run("clear the filters", chromedp.Navigate(base+"/history?namespace=shop"), visible("table.timeline"))
	run("press /", chromedp.KeyEvent("/"))
	if focused := value("the focus", `document.activeElement.name`); focused != "resource" {
		t.Errorf("after /, the focus is on %q, want the first filter", focused)
	}
	run("escape, j, Enter", chromedp.KeyEvent(kb.Escape), chromedp.KeyEvent("j"), chromedp.KeyEvent(kb.Enter))
	at("/history/object?uid=w1-uid")

	// w1's history: three changes, newest first, old -> new and who.
	if n := count("article.change"); n != 3 {
		t.Errorf("w1's history: %d changes, want 3", n)
	}
	newest := text("article.change")
	for _, want := range []string{"bob", "update", `/spec/color`, `"blue"`, `"red"`} {
		if !strings.Contains(newest, want) {
			t.Errorf("w1's newest change lacks %q:\n%s", want, newest)
		}
	}
	old, new := text(`article.change:nth-of-type(2) td.old`), text(`article.change:nth-of-type(2) td.new`)
	if old != "1" || new != "3" || !strings.Contains(text("article.change:nth-of-type(2)"), "alice") {
		t.Errorf("w1's size change: %q -> %q, want 1 -> 3 by alice", old, new)
	}

	// The CRD change: its check and the objects it hits.
	run("open the CRD change", chromedp.Navigate(base+"/history/object?uid=crd-uid"), visible("section.crd"))
	crd := text("section.crd")
	for _, want := range []string{"enum-values-removed", "spec.color", "lab/w2", "shop/w9", "2 objects rejected"} {
		if !strings.Contains(crd, want) {
			t.Errorf("the CRD change lacks %q:\n%s", want, crd)
		}
	}

	// As the shop reader: nothing of lab, not even in the CRD change.
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + r.shop}}); err != nil {
		t.Fatal(err)
	}
	run("as the shop reader", chromedp.Navigate(base+"/history"), visible("table.timeline"))
	if tl := text("table.timeline"); strings.Contains(tl, "lab/") || strings.Contains(tl, "bulk-") || count("tr.entry") != 4 {
		t.Errorf("the shop reader's timeline (%d entries):\n%s", count("tr.entry"), tl)
	}
	run("lab, as the shop reader", chromedp.Navigate(base+"/history?namespace=lab"), visible("p.empty"))
	run("the CRD change, as the shop reader", chromedp.Navigate(base+"/history/object?uid=crd-uid"), visible("section.crd"))
	if crd := text("section.crd"); strings.Contains(crd, "lab/w2") || !strings.Contains(crd, "shop/w9") || !strings.Contains(crd, "1 in namespaces you may not read") {
		t.Errorf("the CRD change as the shop reader:\n%s", crd)
	}
	run("w2, as the shop reader", chromedp.Navigate(base+"/history/object?uid=w2-uid"), visible("p.empty"))
	if out := reqs.outside(base); len(out) > 0 {
		t.Errorf("the pages loaded from elsewhere: %v", out)
	}
}

// jsString quotes s for JavaScript.
func jsString(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), `'`, `\'`) + "'"
}
