package watcher

import (
	"fmt"
	"hash/fnv"
	"math/bits"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Shard splits objects between replicas by the 64-bit FNV-1a hash of their
// UID: shard Index of Total owns the Index-th of Total equal ranges of the
// hash space. The zero Shard (Total 0 or 1) owns everything.
//
// With ServerSide, list and watch requests carry the range as a shard
// selector (ListOptions.ShardSelector, feature gate ShardedListAndWatch), so
// the apiserver sends each replica only its objects. Otherwise every replica
// receives every object and drops the ones it does not own (their cache
// entries keep only the identity).
type Shard struct {
	Index      int
	Total      int
	ServerSide bool
}

// Validate checks the shard numbers.
func (s Shard) Validate() error {
	if s.Total < 0 || s.Index < 0 || (s.Total > 0 && s.Index >= s.Total) {
		return fmt.Errorf("shard %d of %d: want 0 <= shard < total", s.Index, s.Total)
	}
	return nil
}

func (s Shard) enabled() bool { return s.Total > 1 }

// bound returns the start of the i-th range; i == Total is the end of the
// hash space, 2^64, which does not fit in a uint64 (ok is false).
func (s Shard) bound(i int) (b uint64, ok bool) {
	if i >= s.Total {
		return 0, false
	}
	q, _ := bits.Div64(uint64(i), 0, uint64(s.Total)) // i * 2^64 / Total
	return q, true
}

// Selector returns the shard selector for the apiserver, "" when not sharded.
func (s Shard) Selector() string {
	if !s.enabled() {
		return ""
	}
	return fmt.Sprintf("shardRange(object.metadata.uid, '%s', '%s')", s.hex(s.Index), s.hex(s.Index+1))
}

func (s Shard) hex(i int) string {
	b, ok := s.bound(i)
	if !ok {
		return "0x10000000000000000"
	}
	return fmt.Sprintf("0x%016x", b)
}

// owns reports whether the object with this UID belongs to the shard.
func (s Shard) owns(uid types.UID) bool {
	if !s.enabled() {
		return true
	}
	h := fnv.New64a()
	h.Write([]byte(uid))
	sum := h.Sum64()
	lo, _ := s.bound(s.Index)
	hi, bounded := s.bound(s.Index + 1)
	return sum >= lo && (!bounded || sum < hi)
}

// apply adds the shard selector to a list or watch request.
func (s Shard) apply(opts *metav1.ListOptions) {
	if s.enabled() && s.ServerSide {
		opts.ShardSelector = s.Selector()
	}
}
