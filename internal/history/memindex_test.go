package history

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestMemIndexAgainstModel adds entries in mostly rising key order with
// late ones among them, drops the oldest now and then, and compares
// every walk with a sorted list's answer.
func TestMemIndexAgainstModel(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	type entry struct {
		seq     int64
		uid, ns string
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var x memIndex
	var model []entry
	uids := []string{"a", "b", "c", "d", "e", "f", "g"}
	nss := []string{"shop", "lab", ""}
	next, floor := int64(1000), int64(0)
	merges := 0
	check := func(step int) {
		t.Helper()
		if x.len() != len(model) {
			t.Fatalf("step %d: %d entries indexed, want %d", step, x.len(), len(model))
		}
		for _, q := range []struct {
			f     field
			value string
		}{{fieldUID, uids[rng.IntN(len(uids))]}, {fieldNamespace, nss[rng.IntN(len(nss))]}} {
			lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
			if rng.IntN(2) == 0 {
				lo = floor + rng.Int64N(next-floor+1)
			}
			if rng.IntN(2) == 0 {
				hi = floor + rng.Int64N(next-floor+1)
			}
			var want []int64
			for i := len(model) - 1; i >= 0; i-- {
				e := model[i]
				v := e.uid
				if q.f == fieldNamespace {
					v = e.ns
				}
				if v == q.value && e.seq >= lo && e.seq < hi {
					want = append(want, e.seq)
				}
			}
			// All at once, and in steps of 3 going on from the last key.
			if got := x.walk(nil, q.f, keyHash(q.value), lo, hi, math.MaxInt); !slices.Equal(got, want) {
				t.Fatalf("step %d: walk %v %q [%d, %d) = %v, want %v", step, q.f, q.value, lo, hi, got, want)
			}
			var got []int64
			for h := hi; ; {
				chunk := x.walk(nil, q.f, keyHash(q.value), lo, h, 3)
				if len(chunk) == 0 {
					break
				}
				got = append(got, chunk...)
				h = chunk[len(chunk)-1]
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: walk in steps = %v, want %v", step, got, want)
			}
		}
	}
	for step := range 20000 {
		e := entry{uid: uids[rng.IntN(len(uids))], ns: nss[rng.IntN(len(nss))]}
		switch rng.IntN(10) {
		case 0, 1, 2: // late: a key below the newest that is not taken
			e.seq = floor + rng.Int64N(next-floor)
			if slices.ContainsFunc(model, func(m entry) bool { return m.seq == e.seq }) {
				continue
			}
		default:
			next += 1 + rng.Int64N(5)
			e.seq = next
		}
		lateBefore := x.late.len()
		x.add(e.seq, e.uid, e.ns)
		if x.late.len() < lateBefore {
			merges++
		}
		i, _ := slices.BinarySearchFunc(model, e.seq, func(m entry, s int64) int { return int(m.seq - s) })
		model = slices.Insert(model, i, e)
		if step%4000 == 3999 { // trimmed: the oldest fifth
			floor = model[len(model)/5].seq
			x.dropBefore(floor)
			model = slices.DeleteFunc(model, func(m entry) bool { return m.seq < floor })
		}
		if step%100 == 0 {
			check(step)
		}
	}
	check(-1)
	if merges == 0 {
		t.Error("the late entries were never merged in")
	}
	if x.late.len() > x.lateMax() {
		t.Errorf("%d late entries wait, more than %d", x.late.len(), x.lateMax())
	}
}

// TestMemIndexMemory: an indexed entry costs 16 bytes (a key and two
// hashes), whatever its values.
func TestMemIndexMemory(t *testing.T) {
	var x memIndex
	for i := range 100000 {
		x.add(int64(i), "6a1f0000-1111-2222-3333-000000000000"+string(rune('a'+i%26)), "ns")
	}
	bytes := cap(x.main.seq)*8 + cap(x.main.uid)*4 + cap(x.main.ns)*4
	if per := float64(bytes) / 100000; per > 16*1.3 {
		t.Errorf("%.1f bytes an entry, want about 16", per)
	}
}

// TestMemIndexLoad: entries added and dropped while the file's are
// loaded are all there after the load, in order; walks wait for it.
func TestMemIndexLoad(t *testing.T) {
	x := newMemIndex()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := x.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait before the load = %v, want the deadline", err)
	}
	// Added meanwhile: newer ones, and a late one among the file's.
	x.add(100, "a", "shop")
	x.add(101, "b", "shop")
	x.add(15, "a", "lab")
	x.dropBefore(12) // trimmed meanwhile
	file := []int64{10, 11, 12, 20, 30}
	i := 0
	counted := -1
	n := x.load(func(seq *int64, uid, namespace *[]byte) bool {
		if i == len(file) {
			return false
		}
		*seq, *uid, *namespace = file[i], []byte("a"), []byte("shop")
		i++
		return true
	}, func() error { return nil }, func(n int) {
		select {
		case <-x.ready:
			t.Error("the load's count came after its waiters went on")
		default:
		}
		counted = n
	})
	if n != len(file) || counted != n {
		t.Errorf("load = %d, counted %d, want %d", n, counted, len(file))
	}
	if err := x.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := x.walk(nil, fieldUID, keyHash("a"), math.MinInt64, math.MaxInt64, 100), []int64{100, 30, 20, 15, 12}; !slices.Equal(got, want) {
		t.Errorf("uid a: %v, want %v", got, want)
	}
	if got, want := x.walk(nil, fieldNamespace, keyHash("shop"), math.MinInt64, math.MaxInt64, 100), []int64{101, 100, 30, 20, 12}; !slices.Equal(got, want) {
		t.Errorf("namespace shop: %v, want %v", got, want)
	}

	// A load that fails: walks' callers get its error.
	y := newMemIndex()
	failed := errors.New("disk I/O error")
	y.load(func(*int64, *[]byte, *[]byte) bool { return false }, func() error { return failed }, func(n int) {
		if n != 0 {
			t.Errorf("a failed load counted %d entries", n)
		}
	})
	if err := y.wait(context.Background()); !errors.Is(err, failed) {
		t.Errorf("wait after a failed load = %v, want its error", err)
	}
}
