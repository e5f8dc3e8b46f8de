package action

import (
	"context"
	"sync"
)

// asyncLoop is the one worker of an instance whose handler pipelines: it
// starts the queued firings in queue order without waiting for each, and
// retries one that fails (attempt, with backoff, within the action's
// budget) on a goroutine of its own, so that the firings behind it go on.
// It returns when the queue is closed and every firing it started is
// delivered or dead-lettered. Once ctx ends, what is left is
// dead-lettered without an attempt.
func (in *instance) asyncLoop(ctx context.Context, h asyncHandler) {
	var pending sync.WaitGroup
	for it := range in.queue {
		in.took(it)
		if ctx.Err() != nil {
			in.shutdown(it, 0, nil)
			continue
		}
		pending.Add(1)
		h.start(ctx, it, func(err error) {
			if err == nil {
				in.delivered(it)
				pending.Done()
				return
			}
			go func() {
				defer pending.Done()
				in.retryBatch(ctx, []*item{it}, func(ctx context.Context) error {
					return h.attempt(ctx, it)
				}, 1, err)
			}()
		})
	}
	pending.Wait()
}
