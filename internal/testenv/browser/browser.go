// Package browser starts the headless Chromium of the tests that drive
// pages. It is apart from testenv so that the modules whose tests use
// testenv without a browser (charts, hack/image) need no chromedp.
package browser

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// Chromium is Debian's Chromium (`make test` installs the chromium
// package when it is missing), or $FIELDWATCH_CHROMIUM.
func Chromium() string {
	if p := os.Getenv("FIELDWATCH_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// Start starts a headless Chromium for the test, with an empty profile
// and nothing that calls out: no background networking, component
// updates, sync or QUIC. It is stopped (by its process) when the test
// ends; the context it returns ends 3 minutes after the start.
func Start(t *testing.T) context.Context {
	t.Helper()
	testenv.SkipShort(t, testenv.NeedsBrowser)
	if _, err := os.Stat(Chromium()); err != nil {
		t.Fatalf("no Chromium at %s (`make test` installs Debian's chromium package; or set FIELDWATCH_CHROMIUM): %v", Chromium(), err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Chromium()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc() // ends the browser process
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}
