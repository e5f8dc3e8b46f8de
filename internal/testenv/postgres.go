package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server started from Debian's packages
// (`make test` installs `postgresql` when it is missing) for one test or
// test package: its own data directory in a temporary directory, a unix
// socket there and no TCP listener, stopped by its PID.
type Postgres struct {
	// Dir is the socket directory; Port names the socket.
	Dir  string
	Port int
	// User is the superuser the server was initialised with (trust
	// authentication on the socket).
	User string
	cmd  *exec.Cmd
	done chan struct{} // closed when the server exited
	exit error         // its exit status, once done
	root string
}

// PostgresBinDir returns the directory of Debian's PostgreSQL server
// binaries (the newest /usr/lib/postgresql/N/bin), or
// $FIELDWATCH_POSTGRES_BIN.
func PostgresBinDir() (string, error) {
	if dir := os.Getenv("FIELDWATCH_POSTGRES_BIN"); dir != "" {
		return dir, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return va - vb
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server in /usr/lib/postgresql/*/bin: `make test` installs Debian's postgresql package (apt-get install postgresql), or set FIELDWATCH_POSTGRES_BIN")
}

// StartPostgres starts a server for t, stopped when t ends. It fails t
// when the server cannot start: the tests that need it are never
// skipped, except under `go test -short` (the unit tier).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	SkipShort(t, NeedsPostgres)
	p, err := NewPostgres()
	if err != nil {
		t.Fatalf("start PostgreSQL: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Errorf("stop PostgreSQL: %v", err)
		}
	})
	return p
}

// NewPostgres starts a server; the caller must Stop it. As root it runs
// as the postgres user Debian's package creates (PostgreSQL refuses to
// run as root). Under `go test -short` it refuses, as New does.
func NewPostgres() (*Postgres, error) {
	if err := refuseShort(NeedsPostgres); err != nil {
		return nil, err
	}
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "fieldwatch-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: root, Port: 5432, User: "fieldwatch", root: root, done: make(chan struct{})}
	cred, err := postgresCredential(root)
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	data := filepath.Join(root, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", p.User, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(root, "postgres.log"))
	if err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	defer func() { _ = log.Close() }()
	// No TCP listener: the unix socket in root only. fsync off: the
	// server's data is thrown away with the test.
	p.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-k", root, "-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("postgres: %w", err)
	}
	go func() {
		p.exit = p.cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(30 * time.Second); err != nil {
		out, _ := os.ReadFile(filepath.Join(root, "postgres.log"))
		_ = p.Stop()
		return nil, fmt.Errorf("%w\n%s", err, out)
	}
	return p, nil
}

// postgresCredential returns the identity to run the server as: the
// postgres user when running as root (dir is handed to it), else nil.
func postgresCredential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs another user, and Debian's postgres user is missing: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// waitReady waits until the socket accepts connections.
func (p *Postgres) waitReady(timeout time.Duration) error {
	sock := filepath.Join(p.Dir, ".s.PGSQL."+strconv.Itoa(p.Port))
	var failed error // why waiting is pointless
	err := Wait(context.Background(), 50*time.Millisecond, timeout, "PostgreSQL to take queries", func() bool {
		select {
		case <-p.done:
			failed = fmt.Errorf("postgres exited: %v", p.exit)
			return true
		default:
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		_ = c.Close()
		// The socket accepts before the server takes queries: ask.
		out, err := exec.Command(filepath.Join(filepath.Dir(p.cmd.Path), "pg_isready"), "-h", p.Dir, "-p", strconv.Itoa(p.Port)).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "rejecting") && !strings.Contains(string(out), "no response") {
			failed = fmt.Errorf("pg_isready: %v: %s", err, out)
		}
		return err == nil || failed != nil
	})
	if failed != nil {
		return failed
	}
	return err
}

// DSN returns the connection string of database db.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", p.Dir, p.Port, p.User, db)
}

// CreateDatabase creates database name (through psql, so that this
// package needs no driver).
func (p *Postgres) CreateDatabase(ctx context.Context, name string) error {
	psql := filepath.Join(filepath.Dir(p.cmd.Path), "psql")
	out, err := exec.CommandContext(ctx, psql, "-h", p.Dir, "-p", strconv.Itoa(p.Port), "-U", p.User, "-d", "postgres",
		"-v", "ON_ERROR_STOP=1", "-c", `CREATE DATABASE "`+name+`"`).CombinedOutput()
	if err != nil {
		return fmt.Errorf("create database %s: %w: %s", name, err, out)
	}
	return nil
}

// Stop stops the server by its PID (a fast shutdown, then SIGKILL after
// 10 s) and removes its directory.
func (p *Postgres) Stop() error {
	var errs []error
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			errs = append(errs, errors.New("postgres did not stop within 10s of SIGINT: killed"))
		}
	}
	errs = append(errs, os.RemoveAll(p.root))
	return errors.Join(errs...)
}
