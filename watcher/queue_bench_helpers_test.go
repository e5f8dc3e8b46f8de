package watcher

import "k8s.io/apimachinery/pkg/watch"

// benchWrap puts the watcher's gate on an informer's watch stream, as
// newResourceWatch does (BenchmarkQueueing).
func benchWrap(rw *resourceWatch, wi watch.Interface) watch.Interface { return rw.gate(wi) }

// benchLongest returns the longest sequence of one object that waited so
// far (BenchmarkQueueing).
func benchLongest(w *Watcher) int {
	w.pending.mu.Lock()
	defer w.pending.mu.Unlock()
	return w.pending.peak
}
