package directhttp

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

const (
	// defaultIdleTimeout closes a pooled connection idle this long, as
	// net/http's DefaultTransport's IdleConnTimeout does.
	defaultIdleTimeout = 90 * time.Second
	// maxDrain bounds the response body read to keep a connection: a
	// larger one costs the connection rather than the time to read it.
	maxDrain = 64 << 10
	// defaultWriteBuffer is bufio's default size.
	defaultWriteBuffer = 4 << 10
	dialTimeout        = 10 * time.Second
	handshakeTimeout   = 10 * time.Second
)

// Options configure a Client.
type Options struct {
	// MaxIdle bounds the idle connections kept per address.
	MaxIdle int
	// IdleTimeout closes a connection idle this long; 90 s when zero.
	IdleTimeout time.Duration
	// WriteBuffer is the size of each connection's write buffer: a
	// request's headers and body leave in one write when they fit; 4 KiB
	// when zero.
	WriteBuffer int
	// TLSConfig returns the TLS configuration of HTTPS targets, called
	// when the first connection to an address is set up; nil (or a nil
	// result) is the system roots with TLS 1.2 at least. The client sets
	// ServerName (when empty) and NextProtos on a clone.
	TLSConfig func() (*tls.Config, error)
}

// Client holds one pool of kept-alive connections per address. It is safe
// for concurrent use.
type Client struct {
	opts Options

	mu    sync.Mutex
	pools map[poolKey]*pool
}

type poolKey struct {
	https bool
	addr  string
}

// New returns a client with opts.
func New(opts Options) *Client {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = defaultIdleTimeout
	}
	if opts.WriteBuffer <= 0 {
		opts.WriteBuffer = defaultWriteBuffer
	}
	return &Client{opts: opts, pools: map[poolKey]*pool{}}
}

// Target is where a POST goes: a URL's pool, its path and query, and its
// Host header.
type Target struct {
	pool       *pool
	requestURI string
	host       string
}

// Target returns the target of rawURL, or nil (and no error) when the URL
// must go through net/http: it does not parse, is not http or https, has
// user info or a non-ASCII host, or the environment's proxy settings
// (HTTP_PROXY, HTTPS_PROXY, NO_PROXY) send it to a proxy. Its error is
// that of Options.TLSConfig.
func (c *Client) Target(rawURL string) (*Target, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.User != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, nil
	}
	for i := 0; i < len(u.Host); i++ {
		if u.Host[i] >= 0x80 {
			return nil, nil // net/http converts it to punycode
		}
	}
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || proxy != nil {
		return nil, nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	p, err := c.pool(u.Scheme == "https", net.JoinHostPort(u.Hostname(), port), u.Hostname())
	if err != nil {
		return nil, err
	}
	host := u.Host
	if host[len(host)-1] == ':' {
		host = host[:len(host)-1] // an empty port, as net/http drops it
	}
	return &Target{pool: p, requestURI: u.RequestURI(), host: host}, nil
}

// pool returns the pool of addr, setting it up on first use.
func (c *Client) pool(https bool, addr, serverName string) (*pool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := poolKey{https: https, addr: addr}
	if p, ok := c.pools[k]; ok {
		return p, nil
	}
	p := &pool{addr: addr, maxIdle: c.opts.MaxIdle, idleTimeout: c.opts.IdleTimeout, writeBuffer: c.opts.WriteBuffer}
	if https {
		var conf *tls.Config
		if c.opts.TLSConfig != nil {
			var err error
			if conf, err = c.opts.TLSConfig(); err != nil {
				return nil, err
			}
		}
		if conf == nil {
			conf = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		conf = conf.Clone()
		if conf.ServerName == "" {
			conf.ServerName = serverName
		}
		conf.NextProtos = []string{"http/1.1"}
		p.tls = conf
	}
	c.pools[k] = p
	return p, nil
}

// CloseIdle closes the idle connections of every pool.
func (c *Client) CloseIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pools {
		p.closeIdle()
	}
}
