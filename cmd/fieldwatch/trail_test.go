package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fieldwatch/fieldwatch/internal/history"
	"github.com/fieldwatch/fieldwatch/internal/history/historytest"
)

// TestHistoryPubkey: the public key printed is the signing key's, as
// verify --pubkey reads it; a missing or wrong file is bad input.
func TestHistoryPubkey(t *testing.T) {
	keyFile, key := historytest.WriteSigningKey(t)
	code, stdout, stderr := runCLI(t, "history", "pubkey", "--key-file", keyFile)
	if code != 0 || stdout != string(history.MarshalPublicKey(key.Public().(ed25519.PublicKey))) {
		t.Fatalf("exit %d, stdout %q, stderr %q: want the public key's PEM", code, stdout, stderr)
	}
	pubFile := filepath.Join(t.TempDir(), "pub.pem")
	if err := os.WriteFile(pubFile, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLICases(t, []cliCase{
		{name: "no key file", args: []string{"history", "pubkey"}, code: 2, stderr: "--key-file FILE is required"},
		{name: "missing file", args: []string{"history", "pubkey", "--key-file", keyFile + ".missing"}, code: 2, stderr: "signing.pem.missing"},
		{name: "a public key", args: []string{"history", "pubkey", "--key-file", pubFile}, code: 2, stderr: "pub.pem: not a PEM block of type PRIVATE KEY"},
	})
}

// TestHistoryExportVerify: an export of a state directory's history
// verifies with the signing key's public key (exit 0); after a row is
// altered in the file, verify names it and exits 1; another key's
// signatures fail (1); a file that is not an export, or is cut in a
// line, is bad input (2) naming the file and line. The state directory
// verifies in place too, and after a row is edited in history.db,
// verify names it. The entries name their cluster, which the export and
// the CSV carry. A file a newer fieldwatch wrote is bad input (exit 2).
func TestHistoryExportVerify(t *testing.T) {
	dir := t.TempDir()
	keyFile, key := historytest.WriteSigningKey(t)
	path := filepath.Join(dir, "history.db")
	s, err := history.OpenSQLite(path, history.SQLiteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := history.NewRecorder(history.RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), Signer: history.NewSigner(key, "prod")})
	for i := range 20 {
		changes := "[]"
		if i%2 == 0 { // a value a spreadsheet would take for a formula
			changes = fmt.Sprintf(`[{"op":"replace","path":"/data/v","value":"=cmd|' /C calc'!A0","oldValue":"%d"}]`, i)
		}
		p := fmt.Appendf(nil, `{"id":"u%d/1/r","time":"2026-12-01T12:00:%02dZ","rule":"r","type":"updated","resource":{"group":"","version":"v1","resource":"configmaps","kind":"ConfigMap"},"namespace":"ns","name":"cm","uid":"u%d","resourceVersion":"1","cluster":"prod","changes":%s}`, i, i, i, changes)
		r.Record(p, history.Delivered)
	}
	r.Close(context.Background())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub.pem")
	if code, stdout, stderr := runCLI(t, "history", "pubkey", "--key-file", keyFile); code != 0 {
		t.Fatalf("pubkey: %d %s", code, stderr)
	} else if err := os.WriteFile(pub, []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	export := filepath.Join(dir, "trail.jsonl")
	if code, _, stderr := runCLI(t, "history", "export", "--state-dir", dir, "-o", export); code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(export)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	write := func(name string, lines []string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	altered := slices.Clone(lines)
	altered[5] = strings.Replace(altered[5], `"namespace":"ns"`, `"namespace":"kube-system"`, 1)
	otherKey := filepath.Join(dir, "other.pub")
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	if err := os.WriteFile(otherKey, history.MarshalPublicKey(other.Public().(ed25519.PublicKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	cut := slices.Clone(lines)
	cut[len(cut)-1] = cut[len(cut)-1][:40]
	runCLICases(t, []cliCase{
		{name: "intact", args: []string{"history", "verify", export, "--pubkey", pub}, code: 0,
			stdout: `chain "local": 22 links, 20 entries, 1 checkpoints, sealed to position 22(.|\n)*INTACT`},
		{name: "altered", args: []string{"history", "verify", write("altered.jsonl", altered), "--pubkey", pub}, code: 1,
			stdout: `TAMPERED altered: chain "local" position 5 entry u3/1/r \(seq \d+\)`},
		{name: "another key", args: []string{"history", "verify", export, "--pubkey", otherKey}, code: 1,
			stdout: `NO CHECKPOINT SIGNED WITH --pubkey: the first, chain "local" position 22, names cluster "prod"(.|\n)*TAMPERED signature: chain "local" position 22`},
		{name: "its cluster", args: []string{"history", "verify", export, "--pubkey", pub, "--cluster", "prod"}, code: 0, stdout: `INTACT`},
		{name: "another cluster", args: []string{"history", "verify", export, "--pubkey", pub, "--cluster", "dev"}, code: 2,
			stderr: `trail.jsonl: a trail of cluster "prod", not "dev" \(--cluster\)`},
		{name: "another cluster in place", args: []string{"history", "verify", "--state-dir", dir, "--cluster", "dev"}, code: 2,
			stderr: `a trail of cluster "prod", not "dev"`},
		{name: "json", args: []string{"history", "verify", "--pubkey", pub, "-o", "json", export}, code: 0, stdout: `"signed": true`},
		{name: "not an export", args: []string{"history", "verify", pub}, code: 2, stderr: `pub.pem: line 1: not the header`},
		{name: "cut in a line", args: []string{"history", "verify", write("cut.jsonl", cut), "--pubkey", pub}, code: 2,
			stderr: `cut.jsonl: line 23: .*unexpected EOF`},
		{name: "state dir", args: []string{"history", "verify", "--state-dir", dir, "--pubkey", pub}, code: 0,
			stdout: `chain "local": 22 links, 20 entries(.|\n)*INTACT`},
		{name: "by cluster", args: []string{"history", "--state-dir", dir, "--cluster", "prod", "--limit", "1"}, code: 0,
			stdout: `^CLUSTER\s+TIME\s+TYPE.*\nprod\s+2026-12-01T12:00:19Z\s+updated`},
		{name: "another cluster", args: []string{"history", "--state-dir", dir, "--cluster", "dev"}, code: 0, stdout: `^TIME\s+TYPE[^\n]*\n$`},
		{name: "no file", args: []string{"history", "verify"}, code: 2, stderr: "give one of FILE \\(an export\\), --state-dir and --dsn"},
		{name: "a file and a state dir", args: []string{"history", "verify", export, "--state-dir", dir}, code: 2, stderr: "give one of FILE"},
		{name: "no history in the state dir", args: []string{"history", "verify", "--state-dir", t.TempDir()}, code: 1, stderr: "history.db"},
		{name: "bad key", args: []string{"history", "verify", export, "--pubkey", export}, code: 2, stderr: "--pubkey: public key"},
		{name: "export without a store", args: []string{"history", "export"}, code: 2, stderr: "give one of --server, --state-dir and --dsn"},
		{name: "export from a bad URL", args: []string{"history", "export", "--server", "ftp://x"}, code: 2, stderr: "want http://HOST:PORT"},
	})

	// CSV, one row per change, a formula defused.
	csvFile := filepath.Join(dir, "trail.csv")
	if code, _, stderr := runCLI(t, "history", "export", "--state-dir", dir, "--format", "csv", "-o", csvFile); code != 0 {
		t.Fatalf("export --format csv: exit %d: %s", code, stderr)
	}
	f, err := os.Open(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 21 || strings.Join(rows[0], ",") != strings.Join(history.CSVHeader, ",") {
		t.Fatalf("%d rows, header %q: want the header and 20 entries", len(rows), rows[0])
	}
	if got := strings.Join(rows[1], ","); got != "2026-12-01T12:00:00Z,updated,,configmaps,ns,cm,,,,r,u0/1/r,replace,/data/v,0,'=cmd|' /C calc'!A0,,prod" {
		t.Errorf("u0's row: %s", got)
	}
	if got := strings.Join(rows[2], ","); got != "2026-12-01T12:00:01Z,updated,,configmaps,ns,cm,,,,r,u1/1/r,,,,,,prod" {
		t.Errorf("u1's row (no changes): %s", got)
	}
	// The same from a server's /api/v1/history/export, as JSON Lines and
	// as CSV.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/history/export" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCSV, err := os.ReadFile(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	for format, want := range map[string][]byte{"jsonl": b, "csv": wantCSV} {
		code, stdout, stderr := runCLI(t, "history", "export", "--server", srv.URL, "--token-file", tokenFile, "--format", format)
		if code != 0 || stdout != string(want) {
			t.Errorf("export --server --format %s: exit %d, %s; %d bytes, want %d as offline", format, code, stderr, len(stdout), len(want))
		}
	}
	runCLICases(t, []cliCase{
		{name: "bad format", args: []string{"history", "export", "--state-dir", dir, "--format", "xml"}, code: 2, stderr: `--format "xml": want jsonl or csv`},
	})

	// Someone with access to the file edits an entry's namespace.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE entries SET namespace = 'kube-system' WHERE id = 'u7/1/r'`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	runCLICases(t, []cliCase{
		{name: "state dir altered", args: []string{"history", "verify", "--state-dir", dir, "--pubkey", pub}, code: 1,
			stdout: `TAMPERED altered: chain "local" position \d+ entry u7/1/r`},
	})

	// A newer fieldwatch's file is bad input, for every command.
	if db, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", history.SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	newer := `written by a newer fieldwatch \(schema version \d+; this one knows versions up to \d+\)`
	runCLICases(t, []cliCase{
		{name: "newer: list", args: []string{"history", "--state-dir", dir}, code: 2, stderr: newer},
		{name: "newer: verify", args: []string{"history", "verify", "--state-dir", dir}, code: 2, stderr: newer},
		{name: "newer: export", args: []string{"history", "export", "--state-dir", dir}, code: 2, stderr: newer},
	})
}
