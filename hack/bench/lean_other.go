//go:build !linux

package main

import (
	"errors"
	"net"
)

// leanLoop needs epoll: elsewhere the lean receiver refuses to start.
type leanLoop struct{}

func newLeanLoop(*receiver) (*leanLoop, error) {
	return nil, errors.New("lean receiver: needs Linux (epoll)")
}

func (*leanLoop) add(net.Conn) error { return nil }
func (*leanLoop) open() int          { return 0 }
func (*leanLoop) closeIdle()         {}
