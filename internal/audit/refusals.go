package audit

import (
	"sync"
	"time"
)

// RefusalLogInterval is how often the webhook logs refusals of one kind
// (one code and reason) at most: a flood of refused requests is counted in
// full by the metrics, and logged once per interval with how many lines
// were left out.
const RefusalLogInterval = 10 * time.Second

// The reasons a client is refused, as fieldwatch_audit_webhook_refused_total
// labels them.
const (
	// RefusedNoCredentials: neither a token nor a client certificate (401).
	RefusedNoCredentials = "no_credentials"
	// RefusedToken: an Authorization header that is not the token (403).
	RefusedToken = "wrong_token"
	// RefusedCertificate: a client certificate that the client CA did not
	// sign for client authentication (403).
	RefusedCertificate = "untrusted_certificate"
	// RefusedCertificateName: a certificate of the client CA that names
	// none of the client names (403): another client of that CA.
	RefusedCertificateName = "certificate_name"
	// RefusedPeer: a post on PeerPath by a client that does not present
	// the receiver's own certificate (403).
	RefusedPeer = "not_a_peer"
)

var refusedReasons = []string{RefusedNoCredentials, RefusedToken, RefusedCertificate, RefusedCertificateName, RefusedPeer}

// refusalLog decides which refusals are logged: the first of each key,
// then at most one every interval, with the count of those left out.
type refusalLog struct {
	every time.Duration

	mu   sync.Mutex
	keys map[string]*refusalKey
}

type refusalKey struct {
	last       time.Time
	suppressed int
}

// maxRefusalKeys bounds the keys remembered (codes times reasons: a few).
const maxRefusalKeys = 64

func newRefusalLog(every time.Duration) *refusalLog {
	return &refusalLog{every: every, keys: map[string]*refusalKey{}}
}

// allow reports whether a refusal of key at now is logged, and how many of
// key were not since the last one that was.
func (l *refusalLog) allow(key string, now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= maxRefusalKeys {
			clear(l.keys)
		}
		l.keys[key] = &refusalKey{last: now}
		return 0, true
	}
	if now.Sub(k.last) < l.every {
		k.suppressed++
		return 0, false
	}
	suppressed, k.suppressed, k.last = k.suppressed, 0, now
	return suppressed, true
}

// truncate shortens s to at most n bytes for a log line.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
