package action

import "context"

// batchHandler is a handler that delivers several firings in one request
// (the alertmanager action posts a list of alerts): its workers take what
// the queue holds, up to maxBatch firings, and deliver them together,
// retrying the whole batch. attempt still delivers one firing alone.
type batchHandler interface {
	handler
	maxBatch() int
	attemptBatch(ctx context.Context, batch []*item) error
}

// batchLoop is a worker of a batchHandler's instance.
func (in *instance) batchLoop(ctx context.Context, bh batchHandler) {
	limit := bh.maxBatch()
	batch := make([]*item, 0, limit)
	for {
		it, ok := <-in.queue
		if !ok {
			return
		}
		in.took(it)
		batch = append(batch[:0], it)
	fill:
		for len(batch) < limit {
			select {
			case it, ok := <-in.queue:
				if !ok {
					break fill // the next receive returns
				}
				in.took(it)
				batch = append(batch, it)
			default:
				break fill
			}
		}
		in.deliverBatch(ctx, batch, func(ctx context.Context) error {
			return bh.attemptBatch(ctx, batch)
		})
		clear(batch) // let the payloads go
	}
}
