package history

import (
	"context"
	"slices"
	"sync"
)

// memIndex is the embedded store's index of its entries by uid and by
// namespace, kept in memory instead of in the database: an index in the
// file costs every entry a B-tree insert and, since uids and namespaces
// come in no order, a page written to the log and checkpointed (about
// half of what writing an entry costs), while these columns cost 16
// bytes an entry and are rebuilt from the table when the file is
// opened. A query walks them newest first, comparing 32-bit hashes, and
// reads the matching rows by key, where the value itself is compared (a
// hash shared by two values costs a row read, never a wrong answer).
//
// Entries are in key order: those written after the newest one (nearly
// all) are appended; the others (a delivery retried for minutes, a
// standby's copy) wait in a small sorted list merged in when it grows.
//
// The entries in the file when it is opened are loaded in the
// background (load), while new ones are added: walks wait for the load.
type memIndex struct {
	mu    sync.RWMutex
	main  columns
	late  columns
	floor int64 // the highest key dropBefore was given

	ready   chan struct{} // closed when the load is done
	loadErr error         // why it failed

	// resources are those of the entries indexed since the file was
	// opened, removed ones included (Store.Resources).
	resources map[GroupResource]struct{}
	// clusters are those of the same entries (Store.Clusters).
	clusters map[string]struct{}
}

func newMemIndex() *memIndex {
	return &memIndex{ready: make(chan struct{}), resources: map[GroupResource]struct{}{}, clusters: map[string]struct{}{}}
}

// addResource notes a resource that entries are of.
func (x *memIndex) addResource(gr GroupResource) { note(&x.mu, x.resources, gr) }

// resourceList returns the resources noted, in no order.
func (x *memIndex) resourceList() []GroupResource { return noted(&x.mu, x.resources) }

// addCluster notes a cluster that entries are of.
func (x *memIndex) addCluster(c string) { note(&x.mu, x.clusters, c) }

// clusterList returns the clusters noted, sorted.
func (x *memIndex) clusterList() []string {
	return slices.Sorted(slices.Values(noted(&x.mu, x.clusters)))
}

// note adds k to the set m that mu guards, taking the write lock only
// when k is new.
func note[K comparable](mu *sync.RWMutex, m map[K]struct{}, k K) {
	mu.RLock()
	_, ok := m[k]
	mu.RUnlock()
	if !ok {
		mu.Lock()
		m[k] = struct{}{}
		mu.Unlock()
	}
}

// noted returns the keys of the set m that mu guards, in no order.
func noted[K comparable](mu *sync.RWMutex, m map[K]struct{}) []K {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// columns are entries' keys and hashes, in key order.
type columns struct {
	seq     []int64
	uid, ns []uint32
}

// field is which value a walk compares.
type field int

const (
	fieldUID field = iota
	fieldNamespace
)

// keyHash is the 32-bit FNV-1a hash of s.
func keyHash[T string | []byte](s T) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func (c *columns) len() int { return len(c.seq) }

func (c *columns) hashes(f field) []uint32 {
	if f == fieldUID {
		return c.uid
	}
	return c.ns
}

func (c *columns) insert(i int, seq int64, uid, ns uint32) {
	c.seq = slices.Insert(c.seq, i, seq)
	c.uid = slices.Insert(c.uid, i, uid)
	c.ns = slices.Insert(c.ns, i, ns)
}

// dropBefore removes the entries whose key is below seq.
func (c *columns) dropBefore(seq int64) {
	i, _ := slices.BinarySearch(c.seq, seq)
	if i == 0 {
		return
	}
	if i > cap(c.seq)/2 { // copy, so that the removed part's memory goes
		c.seq = slices.Clone(c.seq[i:])
		c.uid = slices.Clone(c.uid[i:])
		c.ns = slices.Clone(c.ns[i:])
		return
	}
	c.seq, c.uid, c.ns = c.seq[i:], c.uid[i:], c.ns[i:]
}

// below returns the index of the first entry that matches h from i
// down to floor (-1: none).
func (c *columns) below(f field, h uint32, i, floor int) int {
	hs := c.hashes(f)
	for ; i >= floor; i-- {
		if hs[i] == h {
			return i
		}
	}
	return -1
}

// lateMax is how many late entries wait before they are merged in: at
// least 1,024, and a 32nd of the others, so that merging (a copy of
// every entry) costs each late entry a bounded number of copies.
func (x *memIndex) lateMax() int { return 1024 + x.main.len()/32 }

// add indexes an entry.
func (x *memIndex) add(seq int64, uid, namespace string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	u, n := keyHash(uid), keyHash(namespace)
	if k := x.main.len(); k == 0 || x.main.seq[k-1] < seq {
		x.main.seq = append(x.main.seq, seq)
		x.main.uid = append(x.main.uid, u)
		x.main.ns = append(x.main.ns, n)
		return
	}
	i, _ := slices.BinarySearch(x.late.seq, seq)
	x.late.insert(i, seq, u, n)
	if x.late.len() > x.lateMax() {
		x.merge()
	}
}

// merge moves the late entries into main.
func (x *memIndex) merge() {
	x.main, x.late = mergeColumns(&x.main, &x.late), columns{}
}

// mergeColumns returns a's and b's entries in key order.
func mergeColumns(a, b *columns) columns {
	n := a.len() + b.len()
	m := columns{seq: make([]int64, 0, n), uid: make([]uint32, 0, n), ns: make([]uint32, 0, n)}
	i, j := 0, 0
	for i < a.len() || j < b.len() {
		from, k := a, i
		if j < b.len() && (i == a.len() || b.seq[j] < a.seq[i]) {
			from, k = b, j
			j++
		} else {
			i++
		}
		m.seq = append(m.seq, from.seq[k])
		m.uid = append(m.uid, from.uid[k])
		m.ns = append(m.ns, from.ns[k])
	}
	return m
}

// dropBefore removes the entries whose key is below seq (trimmed).
func (x *memIndex) dropBefore(seq int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.floor = max(x.floor, seq)
	x.main.dropBefore(seq)
	x.late.dropBefore(seq)
}

// load is the loader: it calls next for each entry of the file when it
// was opened, in key order, until next returns false, then adds them to
// those added meanwhile (less those dropped meanwhile) unless err, the
// load's error, is not nil: then walks return it. It calls counted with
// how many entries it loaded (none after an error) before those waiting
// for the load go on, and returns that number: the store counts them
// there, so that a wait's end finds them counted.
func (x *memIndex) load(next func(seq *int64, uid, namespace *[]byte) bool, err func() error, counted func(n int)) int {
	var loaded columns
	var seq int64
	var uid, namespace []byte
	for next(&seq, &uid, &namespace) {
		loaded.seq = append(loaded.seq, seq)
		loaded.uid = append(loaded.uid, keyHash(uid))
		loaded.ns = append(loaded.ns, keyHash(namespace))
	}
	n := x.mergeLoaded(&loaded, err)
	counted(n)
	close(x.ready)
	return n
}

// mergeLoaded adds loaded, the load's entries, to the index unless err, the
// load's error, is not nil, and returns how many it added.
func (x *memIndex) mergeLoaded(loaded *columns, err func() error) int {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.loadErr = err(); x.loadErr != nil {
		return 0
	}
	added := mergeColumns(&x.main, &x.late)
	x.main, x.late = mergeColumns(loaded, &added), columns{}
	x.main.dropBefore(x.floor)
	return loaded.len()
}

// wait waits for the load.
func (x *memIndex) wait(ctx context.Context) error {
	select {
	case <-x.ready:
		return x.loadErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// len returns how many entries are indexed.
func (x *memIndex) len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.main.len() + x.late.len()
}

// walk returns the keys of the newest entries whose f hashes to h with a
// key in [lo, hi), at most n of them, newest first, appended to seqs.
// A walk goes on from the last key it returned (as hi).
func (x *memIndex) walk(seqs []int64, f field, h uint32, lo, hi int64, n int) []int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	floor := func(c *columns) int { i, _ := slices.BinarySearch(c.seq, lo); return i }
	start := func(c *columns, floor int) int {
		i, _ := slices.BinarySearch(c.seq, hi)
		return c.below(f, h, i-1, floor)
	}
	mf, lf := floor(&x.main), floor(&x.late)
	i, j := start(&x.main, mf), start(&x.late, lf)
	for k := 0; k < n; k++ {
		switch {
		case i >= 0 && (j < 0 || x.main.seq[i] > x.late.seq[j]):
			seqs = append(seqs, x.main.seq[i])
			i = x.main.below(f, h, i-1, mf)
		case j >= 0:
			seqs = append(seqs, x.late.seq[j])
			j = x.late.below(f, h, j-1, lf)
		default:
			return seqs
		}
	}
	return seqs
}
