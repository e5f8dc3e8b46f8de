//go:build linux

package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// leanLoop is the receiver's lean server: one goroutine on a thread of
// its own serves every connection with epoll and plain read and write
// system calls, about 2 a request, where a goroutine a connection costs
// Go's poller a parked goroutine, a wake-up and a retried read for each
// request.
// It serves requests with a Content-Length body (each answered 200 with
// no body); anything else (a chunked body, a malformed head) is
// answered 400, recorded as an error and the connection closed.
type leanLoop struct {
	r    *receiver
	epfd int

	mu    sync.Mutex
	conns map[int]*leanConn // by file descriptor
}

// leanConn is one connection's unanswered bytes, and whether it is to
// close once between requests (the receiver switched servers).
type leanConn struct {
	buf        []byte
	closeAfter bool
}

// leanMaxHead bounds a request's head.
const leanMaxHead = 64 << 10

var leanOK = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

func newLeanLoop(r *receiver) (*leanLoop, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("lean receiver: epoll: %w", err)
	}
	l := &leanLoop{r: r, epfd: epfd, conns: map[int]*leanConn{}}
	go l.run()
	return l, nil
}

// add takes c over: its file descriptor (a duplicate, c closed) joins
// the loop.
func (l *leanLoop) add(c net.Conn) error {
	defer func() { _ = c.Close() }()
	sc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		return err
	}
	fd := -1
	var dupErr error
	if err := sc.Control(func(raw uintptr) { fd, dupErr = syscall.Dup(int(raw)) }); err != nil {
		return err
	}
	if dupErr != nil {
		return fmt.Errorf("lean receiver: dup: %w", dupErr)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		_ = syscall.Close(fd)
		return err
	}
	l.mu.Lock()
	l.conns[fd] = &leanConn{}
	l.mu.Unlock()
	if err := syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP, Fd: int32(fd)}); err != nil {
		l.closeFD(fd)
		return fmt.Errorf("lean receiver: epoll_ctl: %w", err)
	}
	return nil
}

// open returns how many connections the loop serves.
func (l *leanLoop) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// closeIdle has the loop close every connection once it is between
// requests (at once for those that are).
func (l *leanLoop) closeIdle() {
	l.mu.Lock()
	for _, st := range l.conns {
		st.closeAfter = true
	}
	l.mu.Unlock()
}

// closeMarked closes the connections marked to close that are between
// requests: only the loop closes a descriptor it may be reading.
func (l *leanLoop) closeMarked() {
	l.mu.Lock()
	var idle []int
	for fd, st := range l.conns {
		if st.closeAfter && len(st.buf) == 0 {
			idle = append(idle, fd)
		}
	}
	l.mu.Unlock()
	for _, fd := range idle {
		l.closeFD(fd)
	}
}

func (l *leanLoop) closeFD(fd int) {
	l.mu.Lock()
	_, ok := l.conns[fd]
	delete(l.conns, fd)
	l.mu.Unlock()
	if ok {
		_ = syscall.Close(fd) // leaves the epoll set too
	}
}

func (l *leanLoop) run() {
	runtime.LockOSThread()
	events := make([]syscall.EpollEvent, 128)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(l.epfd, events, 20) // ms: closeMarked's pace
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			l.r.fail(fmt.Errorf("lean receiver: epoll_wait: %w", err))
			return
		}
		for _, ev := range events[:n] {
			l.serve(int(ev.Fd), buf)
		}
		l.closeMarked()
	}
}

// serve reads what fd has and answers each whole request in it.
func (l *leanLoop) serve(fd int, buf []byte) {
	l.mu.Lock()
	st := l.conns[fd]
	l.mu.Unlock()
	if st == nil {
		return // closed meanwhile
	}
	n, err := syscall.Read(fd, buf)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
		return
	}
	if err != nil || n == 0 {
		if len(st.buf) > 0 {
			l.r.fail(fmt.Errorf("lean receiver: connection ended amid a request (%d bytes): %v", len(st.buf), err))
		}
		l.closeFD(fd)
		return
	}
	l.mu.Lock()
	st.buf = append(st.buf, buf[:n]...)
	l.mu.Unlock()
	for {
		l.mu.Lock()
		data := st.buf
		l.mu.Unlock()
		end := bytes.Index(data, []byte("\r\n\r\n"))
		if end < 0 {
			if len(data) > leanMaxHead {
				l.refuse(fd, errors.New("request head over 64 KiB"))
			}
			return
		}
		size, id, err := parseHead(data[:end+2])
		if err != nil {
			l.refuse(fd, err)
			return
		}
		total := end + 4 + size
		if len(data) < total {
			return // the rest of the body is to come
		}
		l.r.got(id, data[end+4:total])
		l.mu.Lock()
		st.buf = append(st.buf[:0], data[total:]...)
		l.mu.Unlock()
		if w, err := syscall.Write(fd, leanOK); err != nil || w != len(leanOK) {
			l.r.fail(fmt.Errorf("lean receiver: response: wrote %d of %d bytes: %v", w, len(leanOK), err))
			l.closeFD(fd)
			return
		}
	}
}

// refuse answers 400, records err and closes fd.
func (l *leanLoop) refuse(fd int, err error) {
	l.r.fail(err)
	_, _ = syscall.Write(fd, []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
	l.closeFD(fd)
}

// parseHead parses a request's line and header lines (each ending in
// CRLF); it returns the body's length and the Idempotency-Key.
func parseHead(head []byte) (n int, id string, err error) {
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if !bytes.HasPrefix(line, []byte("POST ")) || !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return 0, "", fmt.Errorf("request line %q: not an HTTP/1.1 POST", line)
	}
	n = -1
	for len(rest) > 0 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, "", fmt.Errorf("header line %q", line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(value)); err != nil || n < 0 {
				return 0, "", fmt.Errorf("Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, "", fmt.Errorf("Transfer-Encoding %q: only Content-Length bodies are served", value)
		case bytes.EqualFold(name, []byte("Idempotency-Key")):
			id = string(value)
		}
	}
	if n < 0 {
		return 0, "", errors.New("no Content-Length")
	}
	return n, id, nil
}
