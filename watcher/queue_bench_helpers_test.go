package watcher

// benchLongest returns the longest sequence of one object that waited so
// far (BenchmarkQueueing).
func benchLongest(w *Watcher) int {
	w.pending.mu.Lock()
	defer w.pending.mu.Unlock()
	return w.pending.peak
}
