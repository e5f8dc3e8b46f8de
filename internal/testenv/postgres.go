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
	"sync"
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
	root string
	bin  string // the server's binaries
	data string // its data directory
	cred *syscall.Credential
	// durable: synchronous_commit on (NewDurablePostgres).
	durable bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the server exited
	exit error         // its exit status, once done
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
// run as root). Under `go test -short` it refuses, as New does. It
// acknowledges a commit before its log is written (synchronous_commit
// off): Kill may lose the last acknowledged commits, which a test of a
// crash must start NewDurablePostgres for.
func NewPostgres() (*Postgres, error) { return newPostgres(false) }

// NewDurablePostgres is NewPostgres with PostgreSQL's default
// durability against a crash of the server: a commit is acknowledged
// once its log is written (to the kernel: fsync stays off, as a crash of
// the server, not of the machine, keeps what the kernel holds).
func NewDurablePostgres() (*Postgres, error) { return newPostgres(true) }

func newPostgres(durable bool) (*Postgres, error) {
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
	p := &Postgres{Dir: root, Port: 5432, User: "fieldwatch", root: root, durable: durable}
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
	p.bin, p.data, p.cred = bin, data, cred
	if err := p.start(); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// start starts the server on its data directory and waits until it
// takes queries.
func (p *Postgres) start() error {
	log, err := os.OpenFile(filepath.Join(p.root, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = log.Close() }()
	// No TCP listener: the unix socket in root only. fsync off: the
	// server's data is thrown away with the test.
	sync := "off"
	if p.durable {
		sync = "on"
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), "-D", p.data, "-k", p.root, "-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit="+sync, "-c", "full_page_writes=off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exit = err
		p.mu.Unlock()
		close(done)
	}()
	if err := p.waitReady(30 * time.Second); err != nil {
		out, _ := os.ReadFile(filepath.Join(p.root, "postgres.log"))
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
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
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	var failed error // why waiting is pointless
	err := Wait(context.Background(), 50*time.Millisecond, timeout, "PostgreSQL to take queries", func() bool {
		select {
		case <-done:
			p.mu.Lock()
			failed = fmt.Errorf("postgres exited: %v", p.exit)
			p.mu.Unlock()
			return true
		default:
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		_ = c.Close()
		// The socket accepts before the server takes queries: ask.
		out, err := exec.Command(filepath.Join(p.bin, "pg_isready"), "-h", p.Dir, "-p", strconv.Itoa(p.Port)).CombinedOutput()
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
	psql := filepath.Join(p.bin, "psql")
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
	err := p.Shutdown()
	return errors.Join(err, os.RemoveAll(p.root))
}

// Shutdown stops the server by its PID (a fast shutdown: sessions are
// ended, what they committed kept; SIGKILL after 10 s), keeping its data
// for Start. A stopped server stays stopped.
func (p *Postgres) Shutdown() error {
	return p.halt(syscall.SIGINT, 10*time.Second)
}

// Kill SIGKILLs the server's process group, as the kernel's OOM killer
// or a container's end does: no checkpoint, sessions cut mid-query.
// Start brings it back, recovering from its write-ahead log.
func (p *Postgres) Kill() error {
	return p.halt(syscall.SIGKILL, 0)
}

// halt sends sig to the server (to its process group for SIGKILL) and
// waits until it exited, killing its group after timeout.
func (p *Postgres) halt(sig syscall.Signal, timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if sig == syscall.SIGKILL {
		return p.killGroup(cmd.Process.Pid, done)
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return errors.Join(fmt.Errorf("postgres did not stop within %s of %s: killed", timeout, sig), p.killGroup(cmd.Process.Pid, done))
	}
}

// killGroup SIGKILLs the server's process group and waits until every
// process of it is gone, then removes the lock file the postmaster left.
// Start must not find a backend still attached to the old shared memory
// ("pre-existing shared memory block is still in use"), nor a lock file
// naming a PID that another process has taken since ("is another
// postmaster running?"): either makes the new server exit at once.
func (p *Postgres) killGroup(pid int, done <-chan struct{}) error {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-done
	err := Wait(context.Background(), 10*time.Millisecond, 10*time.Second, "the killed server's processes to exit", func() bool {
		return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH)
	})
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(p.data, "postmaster.pid")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Start starts a server stopped by Shutdown or Kill again on its data,
// at the same socket, and waits until it takes queries.
func (p *Postgres) Start() error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	default:
		return errors.New("postgres is running")
	}
	return p.start()
}
