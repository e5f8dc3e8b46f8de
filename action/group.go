package action

import (
	"context"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/fieldwatch/fieldwatch/rules"
)

// notifier is a direct receiver (slack, teams, pagerduty, email): it sends
// one message for a group of firings, in one try.
type notifier interface {
	send(ctx context.Context, d *digest) error
}

// grouping is how a direct receiver's instance turns firings into
// messages: groups of the same key collected for window after their
// first, each sent as one message, no faster than limiter allows.
type grouping struct {
	n      notifier
	window time.Duration
	by     groupBy
	listed int
	// limiter paces messages; nil: no limit.
	limiter *rate.Limiter
	// maxWaiting and maxBytes bound the firings (and their payload
	// bytes) waiting in groups: at either bound the oldest group is sent
	// at once and no firing is taken from the queue until there is room,
	// so that the queue fills and Deliver blocks (back-pressure) rather
	// than memory growing.
	maxWaiting int
	maxBytes   int64
}

// groupBy says which of a firing's fields split its action's groups.
type groupBy struct{ namespace, kind, user bool }

// groupKey is a group's identity within one action (so one rule).
type groupKey struct{ namespace, kind, user string }

// group is firings waiting to be sent as one message.
type group struct {
	key   groupKey
	items []*item
	due   time.Time
	bytes int64
}

// Group bounds.
const (
	// DefaultGroupMaxWaiting bounds the firings waiting in one action's
	// groups (BenchmarkGroupWaiting measures their memory).
	DefaultGroupMaxWaiting = 10_000
	// DefaultGroupMaxBytes bounds their payload bytes.
	DefaultGroupMaxBytes = 64 << 20
)

// newGrouping returns the grouping of a direct receiver with options n;
// window and every are the kind's defaults (a zero window: no grouping
// unless n.Group sets one).
func newGrouping(nt notifier, n *rules.Notify, window, every time.Duration, o Options) *grouping {
	g := &grouping{n: nt, window: window, listed: rules.DefaultMaxListed, maxWaiting: o.GroupMaxWaiting, maxBytes: o.GroupMaxBytes}
	if gs := n.Group; gs != nil {
		if gs.Window > 0 {
			g.window = gs.Window
		}
		if gs.MaxListed > 0 {
			g.listed = gs.MaxListed
		}
		for _, b := range gs.By {
			switch b {
			case rules.GroupByNamespace:
				g.by.namespace = true
			case rules.GroupByKind:
				g.by.kind = true
			case rules.GroupByUser:
				g.by.user = true
			}
		}
	}
	burst := rules.DefaultRateBurst
	if r := n.RateLimit; r != nil {
		if r.Every > 0 {
			every = r.Every
		}
		if r.Burst > 0 {
			burst = r.Burst
		}
	}
	if every > 0 {
		g.limiter = rate.NewLimiter(rate.Every(every), burst)
	}
	return g
}

func (g *grouping) key(it *item) groupKey {
	var k groupKey
	if g.by.namespace {
		k.namespace = it.f.Object.Namespace
	}
	if g.by.kind {
		k.kind = it.f.Object.Kind
	}
	if g.by.user {
		k.user = who(&firingView{it.f.User, it.f.Impersonated, it.f.Manager})
	}
	return k
}

// groupLoop is the one worker of a direct receiver: it collects the
// queue's firings into groups and hands each group, once due, to a sender
// goroutine that sends it as one message (sendGroup). A group is due
// window after its first firing, at once when the action is closing (its
// queue closed) or over its bounds; a due group still takes firings of
// its key until the sender takes it. When ctx ends every firing still
// waiting is dead-lettered (or handed over) without an attempt.
func (in *instance) groupLoop(ctx context.Context) {
	g := in.grp
	clk := in.d.opts.Clock
	ready := make(chan []*item)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for batch := range ready {
			in.sendGroup(ctx, batch)
		}
	}()
	defer func() {
		close(ready)
		<-sent
	}()

	open := map[groupKey]*group{}
	var order []*group // by due time: the order groups were opened
	waiting, bytes := 0, int64(0)
	queue := in.queue
	var timer clock.Timer
	var timerDue time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if queue == nil && len(order) == 0 {
			return
		}
		full := waiting >= g.maxWaiting || bytes >= g.maxBytes
		now := clk.Now()
		var out chan []*item
		var head []*item
		var timerC <-chan time.Time
		if len(order) > 0 {
			if queue == nil || full || !order[0].due.After(now) {
				out, head = ready, order[0].items
			} else {
				if timer == nil {
					timer = clk.NewTimer(order[0].due.Sub(now))
				} else if !timerDue.Equal(order[0].due) {
					timer.Stop()
					timer.Reset(order[0].due.Sub(now))
				}
				timerDue = order[0].due
				timerC = timer.C()
			}
		}
		take := queue
		if full {
			take = nil
		}
		select {
		case it, ok := <-take:
			if !ok {
				queue = nil
				continue
			}
			in.took(it)
			k := g.key(it)
			gr := open[k]
			if gr == nil {
				gr = &group{key: k, due: clk.Now().Add(g.window)}
				open[k] = gr
				order = append(order, gr)
			}
			gr.items = append(gr.items, it)
			gr.bytes += int64(len(it.f.Payload))
			waiting++
			bytes += int64(len(it.f.Payload))
			in.m.grouped.Set(float64(waiting))
		case out <- head:
			gr := order[0]
			order[0] = nil
			order = order[1:]
			delete(open, gr.key)
			waiting -= len(gr.items)
			bytes -= gr.bytes
			in.m.grouped.Set(float64(waiting))
		case <-timerC:
			timerDue = time.Time{} // fired: a new due time needs a reset
		case <-ctx.Done():
			for _, gr := range order {
				for _, it := range gr.items {
					in.shutdown(it, 0, nil)
				}
			}
			in.m.grouped.Set(0)
			if queue != nil {
				for it := range queue {
					in.took(it)
					in.shutdown(it, 0, nil)
				}
			}
			return
		}
	}
}

// sendGroup sends batch as one message once the rate limit allows,
// retrying within the action's budget; every firing of batch is then
// delivered, or dead-lettered, together.
func (in *instance) sendGroup(ctx context.Context, batch []*item) {
	g := in.grp
	if !in.pace(ctx) {
		for _, it := range batch {
			in.shutdown(it, 0, nil)
		}
		return
	}
	o := in.d.opts
	d := newDigest(batch, g.listed, o.ClusterName, o.ExternalURL)
	in.deliverBatch(ctx, batch, func(ctx context.Context) error {
		err := g.n.send(ctx, d)
		if err == nil {
			in.m.messages.Inc()
		}
		return err
	})
	clear(batch) // let the payloads go
}

// pace waits for the rate limit; false when ctx ended first.
func (in *instance) pace(ctx context.Context) bool {
	l := in.grp.limiter
	if l == nil {
		return ctx.Err() == nil
	}
	clk := in.d.opts.Clock
	now := clk.Now()
	r := l.ReserveN(now, 1)
	wait := r.DelayFrom(now)
	if wait <= 0 {
		return ctx.Err() == nil
	}
	t := clk.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		r.CancelAt(clk.Now())
		return false
	}
}
