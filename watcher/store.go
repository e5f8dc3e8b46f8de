package watcher

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
)

// Store keeps, per object, the projected state the handler last finished
// with, in a bbolt file, so that after a restart the watcher reports what
// changed while it was down: objects changed since are updates with the
// right old values, objects gone are deletions, objects new are creations,
// objects unchanged fire nothing.
//
// Beside the objects it keeps each informer's watermark (the
// resourceVersion up to which every change it received was handled), so
// that the next run can have the apiserver replay every write since, one
// by one: the objects recorded are then needed only when the apiserver no
// longer has those writes (the run compares with them, and what changed is
// each object's net effect).
//
// Writes are queued and committed in batches by one goroutine, off the
// informers' and workers' paths. A crash loses at most the last batch, and
// what it loses is re-reported after the restart (at least once, with the
// same payload ids): never the reverse. bbolt's transactions make the file
// survive a SIGKILL at any moment. A commit that fails (a full volume)
// keeps its writes, only each object's last one, to commit with the next
// batch: the file stops growing, and the watermarks it holds never pass
// what it records.
//
// The values a projection's Hashed paths select (what payloads redact: a
// Secret's data, say) are stored as salted hashes, never as values; at the
// next start a hash that still matches the object's value is put back as
// that value before comparing.
type Store struct {
	db   *bolt.DB
	path string
	log  *slog.Logger

	flushMu sync.Mutex // one flush at a time, so writes commit in order
	mu      sync.Mutex
	ops     []storeOp
	// committing is how many writes the commit under way holds.
	committing int
	kick       chan struct{}
	closed     chan struct{}
	flushed    chan struct{}
	err        error // the last commit's
	// failures counts failed commits; failing says whether the last one
	// failed; errLog paces their log lines.
	failures atomic.Int64
	failing  atomic.Bool
	errLog   rate.Sometimes

	// known is the set of resources the previous run served; nil on the
	// very first run.
	known map[schema.GroupResource]bool
	// objects counts the objects recorded in the file.
	objects atomic.Int64
	// salt is the file's random salt of hashed values (hashed.go).
	salt []byte
	// resume are the watermarks the previous run recorded.
	resume Watermarks
	// watermarks, when set (follow), gives the watermarks to record;
	// written is what the file holds (flush's alone).
	watermarks func() Watermarks
	written    string
}

// storeOp is one queued write: a put of obj, or a delete of uid.
type storeOp struct {
	res change.Resource
	uid types.UID
	obj *Object // nil: delete
}

// record is how one object is kept on disk.
type record struct {
	Namespace       string `json:"ns,omitempty"`
	Name            string `json:"n"`
	ResourceVersion string `json:"rv"`
	Projection      string `json:"p"` // JSON of the Projection the object was kept under
	Rest            []byte `json:"r"`
}

// resourceMeta describes a bucket's resource, so that its objects can be
// reported deleted when the resource is gone at the next start.
type resourceMeta struct {
	Group, Version, Resource, Kind string
	Namespaced, Custom             bool
	// Namespaces are the namespaces the resource was last watched in;
	// empty for all of them. Objects of other namespaces were not
	// recorded, so at the next start they are not news.
	Namespaces []string `json:",omitempty"`
}

const (
	storeFormat   = "fieldwatch-baseline-v1"
	metaBucket    = "meta"
	formatKey     = "format"
	knownKey      = "known"
	saltKey       = "salt"
	watermarksKey = "watermarks"
	resMetaKey    = "\x00resource" // in each resource bucket; UIDs never start with NUL
	storeBatch    = 1000
	storeInterval = 100 * time.Millisecond
)

// OpenStore opens (or creates) the baseline file. A file that is not a
// fieldwatch baseline or fails its consistency check is moved aside (the
// log says where) and replaced by an empty one: a broken baseline is never
// silently reused. A file held by another process is an error.
func OpenStore(path string, log *slog.Logger) (*Store, error) {
	if log == nil {
		log = slog.Default()
	}
	db, err := openChecked(path)
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("baseline %s is in use by another process", path)
	}
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("baseline %s is unusable (%v) and cannot be moved aside: %w", path, err, rerr)
		}
		log.Error("baseline file is unusable; moved aside, starting with an empty baseline",
			"path", path, "movedTo", aside, "error", err)
		if db, err = openChecked(path); err != nil {
			return nil, fmt.Errorf("create baseline %s: %w", path, err)
		}
	}
	s := &Store{db: db, path: path, log: log, kick: make(chan struct{}, 1), closed: make(chan struct{}), flushed: make(chan struct{}),
		errLog: rate.Sometimes{Interval: 10 * time.Second}}
	if s.known, err = s.readKnown(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.countObjects(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.salt, err = s.readSalt(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.resume, err = s.readWatermarks(); err != nil {
		_ = db.Close()
		return nil, err
	}
	go s.writer()
	return s, nil
}

// openChecked opens the file and checks that it is a consistent
// fieldwatch baseline (or empty, then marks it as one).
func openChecked(path string) (db *bolt.DB, err error) {
	db, err = bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return nil, err
	}
	defer func() {
		// bbolt panics on some corrupted pages rather than erroring.
		if r := recover(); r != nil {
			err = fmt.Errorf("corrupted: %v", r)
		}
		if err != nil {
			_ = db.Close()
			db = nil
		}
	}()
	err = db.Update(func(tx *bolt.Tx) error {
		for cerr := range tx.Check() {
			return fmt.Errorf("consistency check: %w", cerr)
		}
		meta := tx.Bucket([]byte(metaBucket))
		if meta == nil {
			if k, _ := tx.Cursor().First(); k != nil {
				return errors.New("not a fieldwatch baseline (no meta bucket)")
			}
			meta, err := tx.CreateBucket([]byte(metaBucket))
			if err != nil {
				return err
			}
			return meta.Put([]byte(formatKey), []byte(storeFormat))
		}
		if f := string(meta.Get([]byte(formatKey))); f != storeFormat {
			return fmt.Errorf("not a fieldwatch baseline (format %q)", f)
		}
		return nil
	})
	return db, err
}

// readSalt returns the file's salt of hashed values, made on first use.
func (s *Store) readSalt() ([]byte, error) {
	var salt []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(metaBucket))
		if salt = bytes.Clone(meta.Get([]byte(saltKey))); salt != nil {
			return nil
		}
		salt = make([]byte, 16)
		if _, err := rand.Read(salt); err != nil {
			return err
		}
		return meta.Put([]byte(saltKey), salt)
	})
	return salt, err
}

// readWatermarks returns the watermarks the previous run recorded (none
// in a file without them).
func (s *Store) readWatermarks() (Watermarks, error) {
	wm := Watermarks{}
	err := s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket([]byte(metaBucket)).Get([]byte(watermarksKey))
		if raw == nil {
			return nil
		}
		s.written = string(raw)
		if err := json.Unmarshal(raw, &wm); err != nil {
			return fmt.Errorf("baseline %s: watermarks: %w", s.path, err)
		}
		return nil
	})
	return wm, err
}

// resumeFrom returns the watermark the previous run recorded for an
// informer ("" for none).
func (s *Store) resumeFrom(informer string) string { return s.resume[informer] }

// follow makes every commit record the watermarks wm returns, taken
// before the objects to commit: every change at or below a watermark is
// then recorded in the same commit or an earlier one.
func (s *Store) follow(wm func() Watermarks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watermarks = wm
}

func (s *Store) readKnown() (map[schema.GroupResource]bool, error) {
	var known map[schema.GroupResource]bool
	err := s.db.View(func(tx *bolt.Tx) error {
		raw := tx.Bucket([]byte(metaBucket)).Get([]byte(knownKey))
		if raw == nil {
			return nil
		}
		var list []schema.GroupResource
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("baseline %s: known resources: %w", s.path, err)
		}
		known = map[schema.GroupResource]bool{}
		for _, gr := range list {
			known[gr] = true
		}
		return nil
	})
	return known, err
}

// countObjects counts the recorded objects, once at open.
func (s *Store) countObjects() error {
	return s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if string(name) == metaBucket {
				return nil
			}
			if n := b.Stats().KeyN; n > 0 {
				s.objects.Add(int64(n - 1)) // the resource's meta
			}
			return nil
		})
	})
}

// count returns how many objects the baseline records.
func (s *Store) count() int { return int(s.objects.Load()) }

// firstRun reports whether the file had no baseline yet.
func (s *Store) firstRun() bool { return s.known == nil }

// wasKnown reports whether the previous run saw gr served.
func (s *Store) wasKnown(gr schema.GroupResource) bool { return s.known[gr] }

// setKnown records the resources served now.
func (s *Store) setKnown(grs map[schema.GroupResource]bool) error {
	list := make([]schema.GroupResource, 0, len(grs))
	for gr := range grs {
		list = append(list, gr)
	}
	raw, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(metaBucket)).Put([]byte(knownKey), raw)
	})
}

func bucketName(gr schema.GroupResource) []byte { return []byte("r/" + gr.String()) }

// hasResource reports whether objects of gr were ever recorded.
func (s *Store) hasResource(gr schema.GroupResource) bool {
	found := false
	_ = s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketName(gr)) != nil
		return nil
	})
	return found
}

// load returns the recorded objects of gr, as Objects of res's kind.
func (s *Store) load(gr schema.GroupResource, res change.Resource) (map[types.UID]*Object, error) {
	out := map[types.UID]*Object{}
	types_ := map[string]*objectType{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName(gr))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if string(k) == resMetaKey {
				return nil
			}
			var r record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("record %s/%s: %w", gr, k, err)
			}
			typ := types_[r.Projection]
			if typ == nil {
				var p change.Projection
				if err := json.Unmarshal([]byte(r.Projection), &p); err != nil {
					return fmt.Errorf("record %s/%s projection: %w", gr, k, err)
				}
				typ = &objectType{gvk: groupVersion(res).WithKind(res.Kind), apiVersion: res.APIVersion(), projection: p, dict: &packDict{}}
				types_[r.Projection] = typ
			}
			o := &Object{ns: intern(r.Namespace), name: r.Name, resourceVersion: r.ResourceVersion, typ: typ}
			o.setRest(append([]byte(nil), r.Rest...))
			o.setUID(types.UID(k))
			out[types.UID(k)] = o
			return nil
		})
	})
	return out, err
}

// resources returns the resources that have a bucket, with their meta.
func (s *Store) resources() (map[schema.GroupResource]change.Resource, error) {
	out := map[schema.GroupResource]change.Resource{}
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			raw := b.Get([]byte(resMetaKey))
			if raw == nil {
				return nil
			}
			var m resourceMeta
			if err := json.Unmarshal(raw, &m); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
			r := change.Resource{Group: m.Group, Version: m.Version, Resource: m.Resource,
				Kind: m.Kind, Namespaced: m.Namespaced, Custom: m.Custom, Preferred: true}
			out[groupResource(r)] = r
			return nil
		})
	})
	return out, err
}

// scope returns the namespaces gr was last watched in, nil for all.
func (s *Store) scope(gr schema.GroupResource) ([]string, error) {
	var m resourceMeta
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName(gr))
		if b == nil {
			return nil
		}
		if raw := b.Get([]byte(resMetaKey)); raw != nil {
			return json.Unmarshal(raw, &m)
		}
		return nil
	})
	return m.Namespaces, err
}

// setScope records the namespaces res is watched in (nil for all), when
// they differ from what the file holds.
func (s *Store) setScope(res change.Resource, namespaces []string) error {
	if prev, err := s.scope(groupResource(res)); err == nil && slices.Equal(prev, namespaces) {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b, err := s.bucket(tx, res)
		if err != nil {
			return err
		}
		var m resourceMeta
		if err := json.Unmarshal(b.Get([]byte(resMetaKey)), &m); err != nil {
			return err
		}
		m.Namespaces = namespaces
		raw, err := json.Marshal(m)
		if err != nil {
			return err
		}
		return b.Put([]byte(resMetaKey), raw)
	})
}

// track marks res as watched with a baseline, so that the next run
// compares with it even if it records no object.
func (s *Store) track(res change.Resource) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		_, err := s.bucket(tx, res)
		return err
	})
}

// dropResource forgets every object of gr.
func (s *Store) dropResource(gr schema.GroupResource) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketName(gr))
		if b == nil {
			return nil
		}
		n := b.Stats().KeyN - 1
		if err := tx.DeleteBucket(bucketName(gr)); err != nil {
			return err
		}
		tx.OnCommit(func() { s.objects.Add(-int64(n)) })
		return nil
	})
}

// record queues the recording of c's outcome as handled: its object's new
// state, or its deletion. A nil Store records nothing.
func (s *Store) record(c *Change) {
	if s == nil {
		return
	}
	switch c.Type {
	case change.Deleted:
		s.remove(c.Resource, c.Old.GetUID())
	default:
		s.put(c.Resource, c.New)
	}
}

// put queues the recording of obj as res's handled state.
func (s *Store) put(res change.Resource, obj *Object) {
	s.queue(storeOp{res: res, uid: obj.GetUID(), obj: obj})
}

// remove queues the forgetting of an object.
func (s *Store) remove(res change.Resource, uid types.UID) { s.queue(storeOp{res: res, uid: uid}) }

func (s *Store) queue(op storeOp) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	n := len(s.ops)
	s.mu.Unlock()
	// While commits fail, the ticker alone retries: a kick per write
	// would try a doomed commit of every pending write at each change.
	if n >= storeBatch && !s.failing.Load() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// writer commits queued writes every storeInterval or storeBatch writes.
func (s *Store) writer() {
	defer close(s.flushed)
	tick := time.NewTicker(storeInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.closed:
			s.flush()
			return
		case <-tick.C:
		case <-s.kick:
		}
		s.flush()
	}
}

// flush commits the queued writes in one transaction.
func (s *Store) flush() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	follow := s.watermarks
	s.mu.Unlock()
	var marks []byte
	if follow != nil {
		// Before taking the writes: a change a watermark covers queued
		// its write before it was marked done.
		if b, err := json.Marshal(follow()); err == nil && string(b) != s.written {
			marks = b
		}
	}
	s.mu.Lock()
	ops := s.ops
	s.ops, s.committing = nil, len(ops)
	s.mu.Unlock()
	if len(ops) == 0 && marks == nil {
		return
	}
	projections := map[*objectType][]byte{}
	var delta int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		tx.OnCommit(func() { s.objects.Add(delta) })
		if marks != nil {
			if err := tx.Bucket([]byte(metaBucket)).Put([]byte(watermarksKey), marks); err != nil {
				return err
			}
			tx.OnCommit(func() { s.written = string(marks) })
		}
		for _, op := range ops {
			b, err := s.bucket(tx, op.res)
			if err != nil {
				return err
			}
			existed := b.Get([]byte(op.uid)) != nil
			if op.obj == nil {
				if err := b.Delete([]byte(op.uid)); err != nil {
					return err
				}
				if existed {
					delta--
				}
				continue
			}
			if !existed {
				delta++
			}
			p, ok := projections[op.obj.typ]
			if !ok {
				if p, err = json.Marshal(op.obj.typ.projection); err != nil {
					return err
				}
				projections[op.obj.typ] = p
			}
			rest := op.obj.json()
			if hashed := op.obj.typ.projection.Hashed; len(hashed) > 0 {
				// Values payloads redact are stored as hashes.
				if rest, err = hashRest(s.salt, rest, hashed); err != nil {
					return err
				}
			}
			v, err := json.Marshal(record{Namespace: op.obj.GetNamespace(), Name: op.obj.name,
				ResourceVersion: op.obj.resourceVersion, Projection: string(p), Rest: rest})
			if err != nil {
				return err
			}
			if err := b.Put([]byte(op.uid), v); err != nil {
				return err
			}
		}
		return nil
	})
	s.mu.Lock()
	s.err, s.committing = err, 0
	if err != nil {
		// Kept for the next commit, before what was queued since.
		s.ops = coalesce(append(ops, s.ops...))
	}
	pending := len(s.ops)
	s.mu.Unlock()
	switch {
	case err != nil:
		s.failures.Add(1)
		s.failing.Store(true)
		s.errLog.Do(func() {
			s.log.Error("writing the baseline failed; its writes are kept and tried again (see fieldwatch_baseline_write_errors_total): deliveries go on",
				"path", s.path, "pending", pending, "error", err)
		})
	case s.failing.Swap(false):
		s.log.Info("the baseline is written again", "path", s.path, "failedCommits", s.failures.Load())
	}
}

// coalesce keeps, of writes in order, each object's last one.
func coalesce(ops []storeOp) []storeOp {
	type objKey struct {
		gr  schema.GroupResource
		uid types.UID
	}
	last := make(map[objKey]int, len(ops))
	for i, op := range ops {
		last[objKey{groupResource(op.res), op.uid}] = i
	}
	out := ops[:0]
	for i, op := range ops {
		if last[objKey{groupResource(op.res), op.uid}] == i {
			out = append(out, op)
		}
	}
	clear(ops[len(out):])
	return out
}

// failed returns how many commits failed.
func (s *Store) failed() int64 { return s.failures.Load() }

// waiting returns how many writes wait to be committed, those of a
// commit under way included.
func (s *Store) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ops) + s.committing
}

// bucket returns res's bucket, creating it with its meta.
func (s *Store) bucket(tx *bolt.Tx, res change.Resource) (*bolt.Bucket, error) {
	name := bucketName(groupResource(res))
	if b := tx.Bucket(name); b != nil {
		return b, nil
	}
	b, err := tx.CreateBucket(name)
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(resourceMeta{Group: res.Group, Version: res.Version, Resource: res.Resource,
		Kind: res.Kind, Namespaced: res.Namespaced, Custom: res.Custom})
	if err != nil {
		return nil, err
	}
	return b, b.Put([]byte(resMetaKey), raw)
}

// Close commits what is queued and closes the file.
func (s *Store) Close() error {
	close(s.closed)
	<-s.flushed
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	return errors.Join(err, s.db.Close())
}
