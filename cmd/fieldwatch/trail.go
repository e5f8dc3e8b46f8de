package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

const pubkeyUsage = `usage: fieldwatch history pubkey --key-file FILE

Prints the public key of the Ed25519 key that signs the history's
checkpoints (fieldwatch run --history-signing-key-file), as a PEM block
of type PUBLIC KEY: give it to fieldwatch history verify --pubkey, and
keep it where whoever verifies the trail can trust it (docs/trail.md).

Exit codes: 0 printed; 2 bad input.
`

func historyPubkeyCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch history pubkey", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, pubkeyUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	keyFile := fs.String("key-file", "", "the private key (PEM PKCS #8, as openssl genpkey -algorithm ed25519 writes it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *keyFile == "" || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch history pubkey: --key-file FILE is required and no arguments are taken")
		return 2
	}
	key, err := history.LoadSigningKey(*keyFile)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history pubkey: %v\n", err)
		return 2
	}
	_, _ = stdout.Write(history.MarshalPublicKey(key.Public().(ed25519.PublicKey)))
	return 0
}

const exportUsage = `usage: fieldwatch history export (--server URL [--token-file FILE] | --state-dir DIR | --dsn DSN) [--format jsonl|csv] [-o FILE]

Writes the history's audit trail as JSON Lines (docs/trail.md): a header,
then every link of every chain in order, each entry's link with the
entry's row and payload, the gap records and the signed checkpoints;
from a running fieldwatch's /api/v1/history/export (--server; the
token's user must be allowed to list every resource everywhere), or
offline from a state directory copied out of a pod (--state-dir; read
only) or the PostgreSQL database of --history-dsn (--dsn). fieldwatch
history verify checks the file.

--format csv writes, for a spreadsheet, one row per change of each entry
(time, type, object, who, rule, id, op, path, old and new value) and
one per gap record; it is for reading, not verifying. With -o FILE and
a terminal on the standard error, the links written are counted there
as they go.

Exit codes: 0 written; 1 the history could not be read; 2 bad input.
`

func historyExportCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch history export", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, exportUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	server := fs.String("server", "", "a running fieldwatch's HTTP address (http://HOST:PORT or https://HOST:PORT)")
	tokenFile := fs.String("token-file", "", "a file holding the bearer token to send to --server")
	stateDir := fs.String("state-dir", "", "export DIR/history.db")
	dsn := fs.String("dsn", "", "export the PostgreSQL history of --history-dsn (password from $PGPASSWORD or a passfile)")
	out := fs.String("o", "", "write to FILE instead of the standard output")
	format := fs.String("format", "jsonl", "jsonl (the verifiable trail) or csv (one change per row, for a spreadsheet)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *format != "jsonl" && *format != "csv" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: --format %q: want jsonl or csv\n", *format)
		return 2
	}
	sources := 0
	for _, s := range []string{*server, *stateDir, *dsn} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 || fs.NArg() > 0 {
		_, _ = fmt.Fprintln(stderr, "fieldwatch history export: give one of --server, --state-dir and --dsn, and no arguments")
		return 2
	}
	w, file := stdout, stdout
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
			return 2
		}
		defer func() { _ = f.Close() }()
		w, file = f, f
		if p := startProgress(stderr, "fieldwatch history export: %d lines written"); p != nil {
			defer p.stop()
			w = io.MultiWriter(f, p)
		}
	}
	if *server != "" {
		if code := exportFromServer(ctx, *server, *tokenFile, *format, w, stderr); code != 0 {
			return code
		}
	} else {
		trail, closeTrail, err := openTrail(ctx, *stateDir, *dsn)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
			return openFailed(err)
		}
		defer closeTrail()
		if *format == "csv" {
			err = history.WriteCSV(w, func(each func(*history.Link, *history.Entry) error) error { return trail.Links(ctx, each) })
		} else {
			err = history.Export(ctx, trail, w, time.Now())
		}
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
			return 1
		}
	}
	if f, ok := file.(*os.File); ok && f != stdout {
		if err := f.Sync(); err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
			return 1
		}
	}
	return 0
}

// openTrail opens, read only, the trail of the history in DIR/history.db
// (stateDir) or in the PostgreSQL database of dsn, and returns it with
// what closes it.
func openTrail(ctx context.Context, stateDir, dsn string) (history.Trail, func(), error) {
	var (
		store history.Store
		err   error
	)
	if stateDir != "" {
		store, err = history.OpenSQLite(filepath.Join(stateDir, "history.db"), history.SQLiteOptions{ReadOnly: true})
	} else {
		store, err = history.OpenPostgres(ctx, dsn, history.PostgresOptions{})
	}
	if err != nil {
		return nil, nil, err
	}
	trail, ok := store.(history.Trail)
	if !ok {
		_ = store.Close()
		return nil, nil, errors.New("the store keeps no trail")
	}
	return trail, func() { _ = store.Close() }, nil
}

// exportFromServer copies a running fieldwatch's export to w, as CSV
// when format is csv.
func exportFromServer(ctx context.Context, server, tokenFile, format string, w, stderr io.Writer) int {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: --server %q: want http://HOST:PORT or https://HOST:PORT\n", server)
		return 2
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath("/api/v1/history/export").String(), nil)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
		return 2
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history export: --token-file: %v\n", err)
			return 2
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(b)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
		return 1
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %s: %s\n", resp.Status, strings.TrimSpace(string(body)))
		return 1
	}
	if format == "csv" {
		err = history.WriteCSV(w, func(each func(*history.Link, *history.Entry) error) error {
			_, err := history.ReadExport(resp.Body, each)
			return err
		})
	} else {
		_, err = io.Copy(w, resp.Body)
	}
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history export: %v\n", err)
		return 1
	}
	return 0
}

const verifyUsage = `usage: fieldwatch history verify (FILE | --state-dir DIR | --dsn DSN) [--pubkey KEY] [--checkpoint-interval D] [-o text|json]

Checks the history's audit trail offline: an export (fieldwatch history
export, FILE), a state directory copied out of a pod (--state-dir; read
only) or the PostgreSQL database of --history-dsn (--dsn). It recomputes
every chain's hashes from the entries' rows, checks the checkpoints'
signatures with the public key (fieldwatch history pubkey), and reports
each link or entry altered, deleted or out of order with its chain,
position and seq; every gap record (payloads fieldwatch did not keep);
and a cut tail: links after a chain's last checkpoint older than twice
--checkpoint-interval when the export was made (now, for a store).
Without --pubkey, signatures and the tail are not checked.

Exit codes: 0 intact; 1 tampered or incomplete (problems or gaps), or a
store that could not be read; 2 bad input (a file that is not an
export, a key that does not load, a trail whose checkpoints name
another cluster than --cluster). A trail none of whose checkpoints was
made with --pubkey is reported as such, exit 1: another cluster's
export or key, or every key replaced.
`

func historyVerifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fieldwatch history verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = io.WriteString(stderr, verifyUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	pubFile := fs.String("pubkey", "", "the checkpoints' public key: a PEM PUBLIC KEY file (fieldwatch history pubkey) or one of 32 bytes in base64")
	interval := fs.Duration("checkpoint-interval", history.DefaultCheckpointInterval, "fieldwatch's --history-checkpoint-interval: links after the last checkpoint older than twice this are a cut tail")
	output := fs.String("o", "text", "output format: text or json (the report)")
	stateDir := fs.String("state-dir", "", "verify DIR/history.db instead of an export")
	dsn := fs.String("dsn", "", "verify the PostgreSQL history of --history-dsn instead of an export (password from $PGPASSWORD or a passfile)")
	cluster := fs.String("cluster", "", "the cluster the trail must be of (its fieldwatch's --cluster-name, which every checkpoint names): a trail with a checkpoint of another is bad input")
	// The file comes first, the flags after it, or the other way round.
	var file string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	}
	sources := 0
	for _, s := range []string{file, *stateDir, *dsn} {
		if s != "" {
			sources++
		}
	}
	if sources != 1 || fs.NArg() > 1 || (fs.NArg() == 1 && file != fs.Arg(0)) {
		_, _ = fmt.Fprintln(stderr, "fieldwatch history verify: give one of FILE (an export), --state-dir and --dsn")
		return 2
	}
	if *output != "text" && *output != "json" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: -o %q: want text or json\n", *output)
		return 2
	}
	opts := history.VerifyOptions{Interval: *interval}
	if *pubFile != "" {
		key, err := history.LoadPublicKey(*pubFile)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: --pubkey: %v\n", err)
			return 2
		}
		opts.Key = key
	}
	if file == "" {
		trail, closeTrail, err := openTrail(ctx, *stateDir, *dsn)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %v\n", err)
			return openFailed(err)
		}
		defer closeTrail()
		opts.Now = time.Now()
		report, err := history.Verify(func(each func(*history.Link, *history.Entry) error) error { return trail.Links(ctx, each) }, opts)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %v\n", err)
			return 1
		}
		if msg := otherCluster(report, *cluster); msg != "" {
			_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %s\n", msg)
			return 2
		}
		return printVerified(stdout, report, *output)
	}
	walk := func(each func(*history.Link, *history.Entry) error) error {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		h, err := history.ReadExport(f, each)
		if h.Kind == "header" {
			opts.Now = h.Exported
		}
		if err != nil && !errors.Is(err, errHeaderRead) {
			return fmt.Errorf("%s: %w", file, err)
		}
		return err
	}
	// The header's time is known once the file is read: the first walk
	// reads it, Verify's walks then use it.
	if err := walk(func(*history.Link, *history.Entry) error { return errHeaderRead }); err != nil && !errors.Is(err, errHeaderRead) {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %v\n", err)
		return 2
	}
	report, err := history.Verify(walk, opts)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %v\n", err)
		return 2
	}
	if msg := otherCluster(report, *cluster); msg != "" {
		_, _ = fmt.Fprintf(stderr, "fieldwatch history verify: %s: %s\n", file, msg)
		return 2
	}
	return printVerified(stdout, report, *output)
}

// otherCluster says why report is of another cluster than want ("" when
// it is not, or want is ""): a checkpoint names another.
func otherCluster(report *history.Report, want string) string {
	if want == "" {
		return ""
	}
	for _, c := range report.Clusters {
		if c != want {
			return fmt.Sprintf("a trail of cluster %q, not %q (--cluster): its checkpoints name %q", c, want, report.Clusters)
		}
	}
	return ""
}

// printVerified prints report as output (text or json) and returns the
// exit code it calls for.
func printVerified(stdout io.Writer, report *history.Report, output string) int {
	if output == "json" {
		b, _ := json.MarshalIndent(report, "", "  ")
		_, _ = fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printReport(stdout, report)
	}
	if !report.Intact() {
		return 1
	}
	return 0
}

// errHeaderRead stops the walk that reads an export's header.
var errHeaderRead = errors.New("header read")

// printReport prints what verify found, for a person.
func printReport(w io.Writer, r *history.Report) {
	for _, c := range r.Chains {
		_, _ = fmt.Fprintf(w, "chain %q: %d links, %d entries, %d checkpoints, sealed to position %d; %d entries before it started\n",
			c.Chain, c.Links, c.Entries, c.Checkpoints, c.Sealed, c.Outside)
	}
	if r.Trimmed > 0 || r.Superseded > 0 {
		_, _ = fmt.Fprintf(w, "%d entries removed by the bounds, %d replaced by the leader's\n", r.Trimmed, r.Superseded)
	}
	if !r.Signed {
		_, _ = fmt.Fprintln(w, "signatures not checked (no --pubkey): neither a rebuilt chain nor a cut tail can be told")
	}
	for _, g := range r.Gaps {
		_, _ = fmt.Fprintf(w, "GAP chain %q position %d: %d payloads not kept, %s to %s, %v\n",
			g.Chain, g.Pos, g.Gap.Count, g.Gap.From.Format(time.RFC3339), g.Gap.To.Format(time.RFC3339), g.Gap.Reasons)
	}
	if f := r.ForeignKey; f != nil {
		_, _ = fmt.Fprintf(w, "NO CHECKPOINT SIGNED WITH --pubkey: the first, chain %q position %d, names cluster %q and key %s: another cluster's export or key, or every key replaced\n",
			f.Chain, f.Pos, f.Cluster, base64.StdEncoding.EncodeToString(f.Key))
	}
	for _, p := range r.Problems {
		_, _ = fmt.Fprintf(w, "TAMPERED %s\n", p)
	}
	switch {
	case len(r.Problems) > 0:
		_, _ = fmt.Fprintf(w, "NOT INTACT: %d problems\n", len(r.Problems))
	case len(r.Gaps) > 0:
		_, _ = fmt.Fprintf(w, "INCOMPLETE: %d gap records\n", len(r.Gaps))
	default:
		_, _ = fmt.Fprintln(w, "INTACT")
	}
}

// progress counts the lines written through it and prints the count to
// a terminal every second, and once more when stopped.
type progress struct {
	lines  atomic.Int64
	done   chan struct{}
	exited chan struct{}
}

// startProgress returns a progress printing format (with the count) to
// stderr, or nil when stderr is not a terminal.
func startProgress(stderr io.Writer, format string) *progress {
	f, ok := stderr.(*os.File)
	if !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	p := &progress{done: make(chan struct{}), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				_, _ = fmt.Fprintf(f, "\r"+format, p.lines.Load())
			case <-p.done:
				_, _ = fmt.Fprintf(f, "\r"+format+"\n", p.lines.Load())
				return
			}
		}
	}()
	return p
}

func (p *progress) Write(b []byte) (int, error) {
	p.lines.Add(int64(bytes.Count(b, []byte{'\n'})))
	return len(b), nil
}

func (p *progress) stop() {
	close(p.done)
	<-p.exited
}
