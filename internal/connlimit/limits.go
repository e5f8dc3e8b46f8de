package connlimit

import "time"

// The defaults of the HTTP servers.
const (
	// DefaultMaxConns is the most connections a listener holds when the
	// descriptor limit allows it (Caps).
	DefaultMaxConns = 1024
	// DefaultIdleTimeout closes a keep-alive connection without a request
	// this long.
	DefaultIdleTimeout = 30 * time.Second
)

// Want is what one listener asks of the descriptor budget.
type Want struct {
	// Name names the listener.
	Name string
	// Max is the most connections it needs (DefaultMaxConns when 0).
	Max int
}

// minConns is the fewest connections a listener gets, however low the
// descriptor limit.
const minConns = 4

// Caps returns the connection cap of each listener wanted, in order, for
// a process whose descriptor limit is limit (0: unknown): each gets what it
// wants, but at most an even share of half the limit. The other half is
// kept for the rest of the process.
func Caps(limit uint64, wants ...Want) []int {
	caps := make([]int, len(wants))
	for i, w := range wants {
		c := w.Max
		if c <= 0 {
			c = DefaultMaxConns
		}
		if limit > 0 {
			share := limit / 2 / uint64(len(wants))
			c = int(min(uint64(c), max(share, minConns)))
		}
		caps[i] = c
	}
	return caps
}
