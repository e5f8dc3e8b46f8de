package action

import (
	"context"
	"net/http"
	"time"
)

// poster sends a webhook's POST of body with the headers h to requestURI
// on its host, by deadline or until ctx ends, and returns the response
// with the function that releases it (the body read to its end and the
// connection put back): the direct client's side of the webhook, which
// takes the URLs directTargetFor accepts while net/http's Transport takes
// the others. directPool (direct.go, quickresponse.go), an HTTP/1.1
// client that writes each request and reads its response on the worker's
// goroutine, is kept in place of the Transport because
// BenchmarkWebhook4KB, side by side with the Transport tuned as
// httpClients builds it (idle connections for every worker, a 16 KiB
// write buffer) over HTTP/1.1 and HTTP/2, plain and over TLS, measures
// it well over 1.5x better in CPU and in allocations per POST.
type poster interface {
	post(ctx context.Context, deadline time.Time, requestURI, host string, h headerLines, body []byte) (*http.Response, func(), error)
}

var _ poster = &directPool{}
