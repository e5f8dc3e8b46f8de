// Package directhttp is the webhook action's HTTP/1.1 client: a POST is
// written on a kept-alive connection taken from a pool and its response
// read on the caller's goroutine, the usual answer of a receiver (2xx, a
// Content-Length, all of it buffered) without net/http's header map.
// It exists because net/http's Transport spends two goroutines per
// connection and hands every request between them and the caller, most
// of the CPU a webhook backlog's drain costs besides the rules. It is
// used for as long as BenchmarkWebhook4KB in package action, which runs
// it side by side with its fair peer (the Transport tuned as action
// builds it: idle connections for every worker, a larger write buffer;
// over HTTP/1.1 and HTTP/2, plain and over TLS), shows it at least 1.5x
// better in CPU or in allocations per POST (docs/performance.md holds
// the figures); should that stop holding, action posts through net/http
// alone and this package goes. It speaks only what a webhook needs: POST
// with a body, no proxy, no user info in the URL, ASCII hosts; a URL it
// does not take goes through net/http (Client.Target says which).
//
// directhttp imports the standard library and golang.org/x/net only,
// nothing of fieldwatch: TestDependencies keeps it so.
package directhttp
