// Package connlimit keeps the HTTP servers of fieldwatch (/metrics and the
// probes, the Go profiles, the audit webhook receiver) from running the
// process out of file descriptors. A server wraps its listener:
//
//	limit, err := connlimit.FileLimit()
//	caps := connlimit.Caps(limit, connlimit.Want{Name: "http"}, connlimit.Want{Name: "audit-webhook"})
//	ln = connlimit.NewListener(ln, connlimit.Options{Name: "http", Max: caps[0], Metrics: m})
//	err = srv.Serve(ln)
//
// A Listener holds at most a fixed number of connections. When a new one
// arrives and the listener is full, it closes the connection that has
// waited longest without a request in progress (an idle keep-alive
// connection, one still sending its request header, one that never sent
// anything) and takes the new one: a flood of idle connections cannot keep
// the kubelet's probe out, nor a reconnecting apiserver. Only when every
// connection it holds is serving a request is the new one closed at once.
// Both are counted (Metrics).
//
// The caps come from the descriptor limit (FileLimit, Caps): half of
// RLIMIT_NOFILE is shared by the listeners, the other half is kept for the
// rest of the process (the watcher's connections to the apiserver, the
// restart baseline, the dead-letter and state files, action connections and
// exec pipes).
package connlimit
