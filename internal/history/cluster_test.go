package history

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// sqliteSchemaBeforeClusters is the embedded store's table as it was
// before entries kept their cluster.
const sqliteSchemaBeforeClusters = `
CREATE TABLE entries (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL,
  recorded INTEGER NOT NULL,
  rule TEXT NOT NULL,
  type TEXT NOT NULL,
  grp TEXT NOT NULL,
  resource TEXT NOT NULL,
  namespace TEXT NOT NULL,
  name TEXT NOT NULL,
  uid TEXT NOT NULL,
  usr TEXT NOT NULL,
  imp TEXT NOT NULL,
  source TEXT NOT NULL,
  payload BLOB NOT NULL
);`

// writeOldSQLite writes entries into db (then closes it) as a file of
// the schema before clusters, states and the trail holds them.
func writeOldSQLite(t *testing.T, db *sql.DB, entries ...Entry) {
	t.Helper()
	if _, err := db.Exec(sqliteSchemaBeforeClusters); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := db.Exec(`INSERT INTO entries(seq, id, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, source, payload)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, seqOf(e.Time), e.ID, e.Recorded.UnixMicro(), e.Rule, string(e.Type), e.Group, e.Resource,
			e.Namespace, e.Name, e.UID, e.User, e.Impersonated, string(e.Source), e.Payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestClusters: entries of two clusters and of none, in either store:
// Clusters lists them, a query by cluster selects one's, each entry
// reads back with its cluster, and the trail verifies.
func TestClusters(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		s := ts.open(t, "", false)
		var entries []Entry
		for i, c := range []string{"prod", "dev", "", "prod", "dev", "prod"} {
			entries = append(entries, fixture{uid: "u" + string(rune('a'+i)), rv: "1", namespace: "shop", name: "w", cluster: c,
				time: t0.Add(time.Duration(i) * time.Second)}.entry(t, Delivered))
		}
		write(t, s, entries...)
		cs, err := s.Clusters(context.Background())
		if err != nil || !slices.Equal(cs, []string{"", "dev", "prod"}) {
			t.Errorf("Clusters: %q, %v; want \"\", dev, prod", cs, err)
		}
		for _, c := range []struct {
			cluster string
			want    []string
		}{
			{"prod", []string{"uf/1/audit", "ud/1/audit", "ua/1/audit"}},
			{"dev", []string{"ue/1/audit", "ub/1/audit"}},
			{"staging", nil},
			{"", []string{"uf/1/audit", "ue/1/audit", "ud/1/audit", "uc/1/audit", "ub/1/audit", "ua/1/audit"}},
		} {
			if got := queryAll(t, s, Query{Cluster: c.cluster}); !slices.Equal(got, c.want) {
				t.Errorf("cluster %q: %v, want %v", c.cluster, got, c.want)
			}
		}
		p, err := s.Query(context.Background(), Query{Cluster: "dev", Namespace: "shop"})
		if err != nil || len(p.Entries) != 2 || p.Entries[0].Cluster != "dev" {
			t.Errorf("dev's entries in namespace shop: %+v, %v", p.Entries, err)
		}
		if r := verifyTrail(t, s, VerifyOptions{}); !r.Intact() {
			t.Errorf("the trail: %v", r.Problems)
		}
	})
}

// TestClusterMigration: a store written before entries kept their
// cluster gains the column when opened: its entries kept (with none),
// their chain continued and verifying, new entries with their cluster.
func TestClusterMigration(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		old := ts.open(t, "", false)
		before := fixture{uid: "u1", rv: "1", namespace: "shop", name: "w1", time: t0}.entry(t, Delivered)
		write(t, old, before)
		_ = old.Close()
		// As a version before clusters left the database.
		ts.exec(t, "ALTER TABLE "+ts.table+" DROP COLUMN cluster")
		if ts.name == "PostgreSQL" {
			ts.exec(t, "DROP TABLE "+pgClusters)
		}
		s := ts.open(t, "", false)
		added := fixture{uid: "u2", rv: "1", namespace: "shop", name: "w2", cluster: "prod", time: t0.Add(time.Second)}.entry(t, Delivered)
		write(t, s, added)
		if got := queryAll(t, s, Query{}); !slices.Equal(got, []string{added.ID, before.ID}) {
			t.Errorf("after the migration: %v, want [%s %s]", got, added.ID, before.ID)
		}
		if got := queryAll(t, s, Query{Cluster: "prod"}); !slices.Equal(got, []string{added.ID}) {
			t.Errorf("cluster prod: %v, want [%s]", got, added.ID)
		}
		if cs, err := s.Clusters(context.Background()); err != nil || !slices.Equal(cs, []string{"", "prod"}) {
			t.Errorf("Clusters: %q, %v; want \"\", prod", cs, err)
		}
		if r := verifyTrail(t, s, VerifyOptions{}); !r.Intact() || r.Chains[0].Entries != 2 {
			t.Errorf("the trail: %+v, want intact with 2 entries", r)
		}
	})
}

// TestClusterReadOnly: a file written before clusters were kept opens
// read-only as it is, no entry with a cluster.
func TestClusterReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	old := fixture{uid: "u1", rv: "1", namespace: "shop", name: "w1", time: t0}.entry(t, Delivered)
	writeOldSQLite(t, db, old)
	ro, err := OpenSQLite(path, SQLiteOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ro.Close() }()
	if got := queryAll(t, ro, Query{}); !slices.Equal(got, []string{old.ID}) {
		t.Errorf("read-only: %v, want [%s]", got, old.ID)
	}
	if got := queryAll(t, ro, Query{Cluster: "prod"}); len(got) != 0 {
		t.Errorf("read-only, cluster prod: %v, want none", got)
	}
	if cs, err := ro.Clusters(context.Background()); err != nil || !slices.Equal(cs, []string{""}) {
		t.Errorf("read-only Clusters: %q, %v; want only \"\"", cs, err)
	}
}

// TestNewerSchema: a store a newer fieldwatch wrote (a higher schema
// version) is refused with ErrNewerSchema naming the version, read-only
// or not, and left as it was: not set aside, not migrated.
func TestNewerSchema(t *testing.T) {
	ctx := context.Background()
	t.Run("SQLite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "history.db")
		s, err := OpenSQLite(path, SQLiteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		write(t, s, fixture{uid: "u1", rv: "1", namespace: "shop", name: "w1", time: t0}.entry(t, Delivered))
		_ = s.Close()
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
			t.Fatal(err)
		}
		_ = db.Close()
		for _, ro := range []bool{true, false} {
			_, err := OpenSQLite(path, SQLiteOptions{ReadOnly: ro})
			if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", SchemaVersion+1)) {
				t.Errorf("read-only %v: %v, want ErrNewerSchema naming version %d", ro, err, SchemaVersion+1)
			}
		}
		if db, err = sql.Open("sqlite", "file:"+path); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		var n, v int
		if err := db.QueryRow("SELECT count(*), (SELECT user_version FROM pragma_user_version) FROM entries").Scan(&n, &v); err != nil || n != 1 || v != SchemaVersion+1 {
			t.Errorf("the file after the refusals: %d entries, version %d, %v; want its one entry, version %d", n, v, err, SchemaVersion+1)
		}
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		dsn := newPGDatabase(t)
		s, err := OpenPostgres(ctx, dsn, PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "UPDATE "+pgMeta+" SET value = $1 WHERE name = 'schema'", fmt.Sprint(SchemaVersion+1)); err != nil {
			t.Fatal(err)
		}
		_, err = OpenPostgres(ctx, dsn, PostgresOptions{})
		if !errors.Is(err, ErrNewerSchema) || !strings.Contains(err.Error(), fmt.Sprintf("schema version %d", SchemaVersion+1)) {
			t.Errorf("%v, want ErrNewerSchema naming version %d", err, SchemaVersion+1)
		}
		var v string
		if err := conn.QueryRow(ctx, "SELECT value FROM "+pgMeta+" WHERE name = 'schema'").Scan(&v); err != nil || v != fmt.Sprint(SchemaVersion+1) {
			t.Errorf("the schema row after the refusal: %q, %v; want it as it was", v, err)
		}
	})
}

// TestVerifyClusters: a report names the clusters its checkpoints name;
// verified with another key than the one that made them all, it names
// the first checkpoint as made with another key (an export of another
// cluster, or the keys replaced), and each as a bad signature.
func TestVerifyClusters(t *testing.T) {
	s := openSQLite(t)
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sealedTrail(t, s, key)
	r := verifyTrail(t, s, VerifyOptions{Key: key.Public().(ed25519.PublicKey)})
	if !r.Intact() || !slices.Equal(r.Clusters, []string{"prod"}) || r.ForeignKey != nil {
		t.Errorf("with its key: intact %v, clusters %q, foreign %+v; want intact, prod, none", r.Intact(), r.Clusters, r.ForeignKey)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	r = verifyTrail(t, s, VerifyOptions{Key: other})
	if f := r.ForeignKey; f == nil || f.Pos != 12 || f.Cluster != "prod" || !bytes.Equal(f.Key, key.Public().(ed25519.PublicKey)) {
		t.Errorf("with another key: foreign %+v, want the checkpoint at 12, of prod, with the key that made it", f)
	}
	if len(r.Problems) != 3 || r.Problems[0].Kind != BadSignature {
		t.Errorf("with another key: %v, want the three checkpoints' bad signatures", r.Problems)
	}
}
