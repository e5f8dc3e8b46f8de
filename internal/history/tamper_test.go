package history

import (
	"context"
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// sealedTrail writes 30 entries into s, a checkpoint signed with key
// after each 10: start (1), entries 2-11, checkpoint 12, entries 13-22,
// checkpoint 23, entries 24-33, checkpoint 34. It returns each link's
// entry by position.
func sealedTrail(t *testing.T, s Store, key ed25519.PrivateKey) map[int64]*Entry {
	t.Helper()
	signer := NewSigner(key, "prod")
	for k := 0; k < 30; k += 10 {
		write(t, s, batch(t, k, 10)...)
		if err := s.(Trail).Append(context.Background(), []Record{signer.record()}); err != nil {
			t.Fatal(err)
		}
	}
	byPos := map[int64]*Entry{}
	err := s.(Trail).Links(context.Background(), func(l *Link, e *Entry) error {
		byPos[l.Pos] = e
		return nil
	})
	if err != nil || len(byPos) != 34 {
		t.Fatalf("%d links, %v: want 34", len(byPos), err)
	}
	return byPos
}

// exportFile exports trail, as read at now, to path.
func exportFile(tb testing.TB, trail Trail, path string, now time.Time) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := Export(context.Background(), trail, f, now); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// verifyFile verifies the export at path.
func verifyFile(path string, opts VerifyOptions) (*Report, error) {
	return Verify(func(each func(*Link, *Entry) error) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		_, err = ReadExport(f, each)
		return err
	}, opts)
}

// exportVerify exports s's trail as it would be read at now, then
// verifies the file with pub.
func exportVerify(t *testing.T, s Store, pub ed25519.PublicKey, now time.Time) *Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trail.jsonl")
	exportFile(t, s.(Trail), path, now)
	r, err := verifyFile(path, VerifyOptions{Key: pub, Now: now})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return r
}

// ph is the store's placeholder for the i-th parameter.
func (ts *trailStore) ph(i int) string {
	if ts.name == "SQLite" {
		return "?"
	}
	return "$" + string(rune('0'+i))
}

// TestTamper: someone with write access to the database alters, deletes
// or rebuilds what fieldwatch wrote; an export of it, verified offline
// with the public key, names each change by its chain position and seq,
// and finds nothing wrong where nothing was changed or where the bounds
// removed entries.
func TestTamper(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name   string
		tamper func(t *testing.T, ts *trailStore, s Store, byPos map[int64]*Entry, seal func())
		want   []ProblemKind // the problems' kinds, in order
		pos    []int64       // and positions
		check  func(t *testing.T, r *Report, byPos map[int64]*Entry)
	}{
		{name: "untouched"},
		{
			name: "edit a user",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				ts.exec(t, "UPDATE "+ts.table+" SET usr = 'mallory' WHERE seq = "+ts.ph(1), byPos[15].Seq)
			},
			want: []ProblemKind{Altered}, pos: []int64{15},
			check: func(t *testing.T, r *Report, byPos map[int64]*Entry) {
				if p := r.Problems[0]; p.Seq != byPos[15].Seq || p.Ref != byPos[15].ID {
					t.Errorf("problem %s: want entry %s (seq %d) named", p, byPos[15].ID, byPos[15].Seq)
				}
			},
		},
		{
			// Entry k of the batches names cluster prod when k%3 == 0:
			// the entry at position 15 is entry 12, that at 14 entry 11.
			name: "move an entry to another cluster",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				if byPos[15].Cluster != "prod" {
					t.Fatalf("the entry at 15 has cluster %q: want prod", byPos[15].Cluster)
				}
				ts.exec(t, "UPDATE "+ts.table+" SET cluster = 'dev' WHERE seq = "+ts.ph(1), byPos[15].Seq)
			},
			want: []ProblemKind{Altered}, pos: []int64{15},
		},
		{
			name: "give an entry a cluster",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				if byPos[14].Cluster != "" {
					t.Fatalf("the entry at 14 has cluster %q: want none", byPos[14].Cluster)
				}
				ts.exec(t, "UPDATE "+ts.table+" SET cluster = 'prod' WHERE seq = "+ts.ph(1), byPos[14].Seq)
			},
			want: []ProblemKind{Altered}, pos: []int64{14},
		},
		{
			name: "replace a payload",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				ts.exec(t, "UPDATE "+ts.table+" SET payload = "+ts.ph(1)+" WHERE seq = "+ts.ph(2), byPos[16].Payload, byPos[5].Seq)
			},
			want: []ProblemKind{Altered}, pos: []int64{5},
		},
		{
			name: "delete an entry",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				ts.exec(t, "DELETE FROM "+ts.table+" WHERE seq = "+ts.ph(1), byPos[17].Seq)
			},
			want: []ProblemKind{Deleted}, pos: []int64{17},
			check: func(t *testing.T, r *Report, byPos map[int64]*Entry) {
				if p := r.Problems[0]; p.Seq != byPos[17].Seq {
					t.Errorf("problem %s: want seq %d named", p, byPos[17].Seq)
				}
			},
		},
		{
			name: "delete an entry and its link",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				ts.exec(t, "DELETE FROM "+ts.table+" WHERE seq = "+ts.ph(1), byPos[17].Seq)
				ts.exec(t, "DELETE FROM "+ts.trail+" WHERE pos = 17")
			},
			want: []ProblemKind{Deleted}, pos: []int64{17},
		},
		{
			name: "cut the tail",
			tamper: func(t *testing.T, ts *trailStore, _ Store, byPos map[int64]*Entry, _ func()) {
				for pos := int64(26); pos <= 34; pos++ {
					if e := byPos[pos]; e != nil {
						ts.exec(t, "DELETE FROM "+ts.table+" WHERE seq = "+ts.ph(1), e.Seq)
					}
				}
				ts.exec(t, "DELETE FROM "+ts.trail+" WHERE pos > 25")
			},
			want: []ProblemKind{CutTail}, pos: []int64{24},
		},
		{
			name: "rebuild the chain without the key",
			tamper: func(t *testing.T, ts *trailStore, s Store, byPos map[int64]*Entry, _ func()) {
				ts.exec(t, "UPDATE "+ts.table+" SET usr = 'mallory' WHERE seq = "+ts.ph(1), byPos[15].Seq)
				// Every hash from 15 on, recomputed over the rows as they are now.
				var prev []byte
				var links []Link
				err := s.(Trail).Links(context.Background(), func(l *Link, _ *Entry) error {
					if l.Pos >= 15 {
						links = append(links, *l)
					} else {
						prev = l.Hash
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range links {
					l.Prev = prev
					prev = LinkHash(&l)
					ts.exec(t, "UPDATE "+ts.trail+" SET hash = "+ts.ph(1)+" WHERE pos = "+ts.ph(2), prev, l.Pos)
				}
			},
			// The chain holds together; the checkpoints after the change
			// do not verify, so what follows the last one that does is
			// unsealed, and old: a cut tail.
			want: []ProblemKind{CutTail, BadSignature, BadSignature}, pos: []int64{13, 23, 34},
		},
		{
			name: "trimmed by the bounds",
			tamper: func(t *testing.T, _ *trailStore, s Store, _ map[int64]*Entry, seal func()) {
				tr, err := s.Trim(context.Background(), t0.Add(12*time.Second), 0)
				if err != nil || tr.Age == 0 {
					t.Fatalf("Trim = %+v, %v", tr, err)
				}
				seal() // as the recorder does after the trim's link
			},
			check: func(t *testing.T, r *Report, _ map[int64]*Entry) {
				// The links before the first entry kept go too, but the
				// one before it, the anchor.
				if c := r.Chains[0]; r.Trimmed == 0 || c.Pruned == 0 || c.Links+c.Pruned != 36 {
					t.Errorf("report %+v: want entries trimmed, the chain's start pruned with them", r)
				}
			},
		},
		{
			name: "delete the chain's start",
			tamper: func(t *testing.T, ts *trailStore, _ Store, _ map[int64]*Entry, _ func()) {
				ts.exec(t, "DELETE FROM "+ts.trail+" WHERE pos < 5")
			},
			want: []ProblemKind{Deleted}, pos: []int64{1},
		},
	}
	for _, store := range []struct {
		name string
		open func(t *testing.T) *trailStore
	}{{"SQLite", sqliteTrailStore}, {"PostgreSQL", pgTrailStore}} {
		t.Run(store.name, func(t *testing.T) {
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					ts := store.open(t)
					key := newKey(t)
					s := ts.open(t, "", false)
					byPos := sealedTrail(t, s, key)
					if tt.tamper != nil {
						tt.tamper(t, ts, s, byPos, func() {
							if err := s.(Trail).Append(context.Background(), []Record{NewSigner(key, "prod").record()}); err != nil {
								t.Fatal(err)
							}
						})
					}
					r := exportVerify(t, s, publicOf(key), now.Add(time.Hour))
					var kinds []ProblemKind
					var pos []int64
					for _, p := range r.Problems {
						kinds, pos = append(kinds, p.Kind), append(pos, p.Pos)
					}
					if len(kinds) != len(tt.want) || (len(kinds) > 0 && (!equal(kinds, tt.want) || !equal(pos, tt.pos))) {
						t.Fatalf("problems %+v: want %v at %v", r.Problems, tt.want, tt.pos)
					}
					if len(tt.want) == 0 && !r.Intact() {
						t.Errorf("report %+v: want it intact", r)
					}
					if tt.check != nil {
						tt.check(t, r, byPos)
					}
				})
			}
		})
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
