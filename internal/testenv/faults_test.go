package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestProxyStall: a stalled proxy carries no byte either way on an open
// connection, closes nothing, and delivers what was sent meanwhile, in
// order, once resumed.
func TestProxyStall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	px := NewProxy(t, ln.Addr().String())
	c, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	echo := func(msg string) (string, error) {
		if _, err := c.Write([]byte(msg)); err != nil {
			return "", err
		}
		buf := make([]byte, len(msg))
		_, err := io.ReadFull(c, buf)
		return string(buf), err
	}
	if got, err := echo("before"); err != nil || got != "before" {
		t.Fatalf("echo before the stall: %q, %v", got, err)
	}

	px.Stall()
	if _, err := c.Write([]byte("during")); err != nil {
		t.Fatalf("write while stalled: %v (the connection must stay open)", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var ne net.Error
	if n, err := c.Read(make([]byte, 16)); n != 0 || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read while stalled: %d bytes, %v; want nothing until the deadline", n, err)
	}
	_ = c.SetReadDeadline(time.Time{})

	px.Resume()
	buf := make([]byte, len("during"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "during" {
		t.Fatalf("after Resume: %q, %v; want what was sent during the stall", buf, err)
	}
	if got, err := echo("after"); err != nil || got != "after" {
		t.Fatalf("echo after the stall: %q, %v", got, err)
	}
}

// TestPostgresRestart: the server stopped (Shutdown) or killed (Kill)
// refuses queries and, started again, takes them on its old data: a
// database created before is still there.
func TestPostgresRestart(t *testing.T) {
	SkipShort(t, NeedsPostgres)
	pg, err := NewPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ctx := context.Background()
	if err := pg.CreateDatabase(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	query := func() error {
		out, err := exec.CommandContext(ctx, filepath.Join(pg.bin, "psql"), "-h", pg.Dir, "-p", strconv.Itoa(pg.Port),
			"-U", pg.User, "-d", "kept", "-v", "ON_ERROR_STOP=1", "-c", "SELECT 1").CombinedOutput()
		if err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	for _, tc := range []struct {
		name string
		halt func() error
	}{
		{"shutdown", pg.Shutdown},
		{"kill", pg.Kill},
	} {
		if err := tc.halt(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := query(); err == nil {
			t.Fatalf("%s: the stopped server answered a query", tc.name)
		}
		if err := pg.Start(); err != nil {
			t.Fatalf("%s: start again: %v", tc.name, err)
		}
		if err := pg.Start(); err == nil {
			t.Fatalf("%s: Start of a running server did not fail", tc.name)
		}
		if err := query(); err != nil {
			t.Fatalf("%s: query after the restart: %v", tc.name, err)
		}
	}
}
