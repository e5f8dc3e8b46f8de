package action

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fieldwatch/fieldwatch/rules"
)

// natsSink publishes payloads to a JetStream subject. One connection per
// action, opened on the first publish, reconnecting on its own for as
// long as the action lives; closed with the action (reload, shutdown).
type natsSink struct {
	spec    *rules.NATSAction
	subject *subjectTemplate
	ce      *cloudEvents
	timeout time.Duration
	log     *slog.Logger
	servers string // redacted, for logs and errors

	mu     sync.Mutex
	nc     *nats.Conn
	js     jetstream.JetStream
	closed bool
}

var (
	_ handler = &natsSink{}
	_ closer  = &natsSink{}
)

func newNATS(spec *rules.NATSAction, log *slog.Logger) *natsSink {
	n := &natsSink{
		spec:    spec,
		subject: newSubjectTemplate(spec.Subject, validSubject),
		ce:      newCloudEvents(spec.CloudEvents),
		timeout: spec.Timeout,
		log:     log,
		servers: redactURLs(spec.URL),
	}
	if n.timeout <= 0 {
		n.timeout = rules.DefaultNATSTimeout
	}
	return n
}

// redactURLs returns the scheme and host of each URL of a comma-separated
// list (safeURL), what logs, errors and dead letters may show of them.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = safeURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

func (n *natsSink) attempt(ctx context.Context, it *item) error {
	js, err := n.jetStream()
	if err != nil {
		return err
	}
	subject, err := n.subject.render(it.f.Payload)
	if err != nil {
		return permanent(fmt.Errorf("subject: %w", err))
	}
	msg := nats.NewMsg(subject)
	msg.Data = it.f.Payload
	if n.ce != nil {
		if n.ce.binary() {
			msg.Header.Set("content-type", PayloadContentType)
			n.ce.headers(&it.f, "ce-", msg.Header.Set)
		} else {
			if msg.Data, err = n.ce.structured(&it.f, it.f.Payload); err != nil {
				return permanent(err)
			}
			msg.Header.Set("content-type", CloudEventsContentType)
		}
	}
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(it.f.ID)}
	if n.spec.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(n.spec.Stream))
	}
	ctx, cancel := context.WithTimeout(ctx, n.timeout)
	defer cancel()
	if _, err := js.PublishMsg(ctx, msg, opts...); err != nil {
		return classifyNATS(fmt.Errorf("publish to %s on %s: %w", subject, n.servers, err))
	}
	return nil
}

// classifyNATS makes the errors JetStream answers with a 4xx code (the
// message does not fit the stream, the stream is not the expected one)
// permanent; anything else (no ack in time, no stream responding, the
// connection down) is retried.
func classifyNATS(err error) error {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code >= 400 && api.Code < 500 {
		return permanent(err)
	}
	return err
}

// jetStream returns the action's JetStream context, connecting on first
// use. The connection retries a server that is not up yet, and reconnects
// without bound; meanwhile publishes fail their attempts and are retried.
func (n *natsSink) jetStream() (jetstream.JetStream, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, permanent(errors.New("nats action closed"))
	}
	if n.js != nil {
		return n.js, nil
	}
	opts, err := n.options()
	if err != nil {
		return nil, err // the credentials may be mounted later
	}
	nc, err := nats.Connect(n.spec.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", n.servers, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream on %s: %w", n.servers, err)
	}
	n.nc, n.js = nc, js
	return js, nil
}

// natsReconnectWait is the wait between two reconnection rounds.
const natsReconnectWait = 250 * time.Millisecond

// options are the connection's options: reconnect forever, authenticate,
// TLS with files re-read when they change, and log connection changes.
func (n *natsSink) options() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name("fieldwatch"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(natsReconnectWait),
		nats.Timeout(min(n.timeout, 5*time.Second)),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				n.log.Warn("nats disconnected", "servers", n.servers, "error", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			n.log.Info("nats reconnected", "servers", n.servers)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			n.log.Warn("nats error", "servers", n.servers, "error", err)
		}),
	}
	s := n.spec
	for _, f := range []string{s.CredentialsFile, s.NKeySeedFile} {
		if f != "" && readsCredentials(f) {
			return nil, permanent(fmt.Errorf("%s leads to the service account's credentials: refused", f))
		}
	}
	switch {
	case s.CredentialsFile != "":
		opts = append(opts, nats.UserCredentials(s.CredentialsFile))
	case s.NKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(s.NKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed file: %w", err)
		}
		opts = append(opts, o)
	case s.TokenFile != "" || s.TokenEnv != "":
		read := secretReader(s.TokenFile, s.TokenEnv)
		if _, err := read(); err != nil {
			return nil, fmt.Errorf("nats token: %w", err)
		}
		opts = append(opts, nats.TokenHandler(func() string {
			tok, _ := read()
			return string(tok)
		}))
	}
	files := tlsFiles{ca: s.CAFile, cert: s.CertFile, key: s.KeyFile}
	if files != (tlsFiles{}) {
		conf, err := files.config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(conf))
	}
	return opts, nil
}

// close closes the connection, flushing what it buffered.
func (n *natsSink) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.nc != nil {
		n.nc.Close()
		n.nc, n.js = nil, nil
	}
}

// secretReader reads a secret from file (re-read when it changes) or from
// the environment variable env, surrounding white space trimmed. Its
// errors name the file or variable, never the value.
func secretReader(file, env string) func() ([]byte, error) {
	if file != "" {
		fc := &fileCache{path: file}
		return fc.get
	}
	return func() ([]byte, error) {
		v := strings.TrimSpace(os.Getenv(env))
		if v == "" {
			return nil, fmt.Errorf("environment variable %s is empty", env)
		}
		return []byte(v), nil
	}
}

// validSubject checks a rendered NATS subject: tokens separated by dots,
// none empty, no white space, no wildcards.
func validSubject(s string) error {
	if s == "" {
		return errors.New("empty subject")
	}
	if len(s) > 1024 {
		return fmt.Errorf("subject of %d bytes is longer than 1024", len(s))
	}
	for tok := range strings.SplitSeq(s, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("%q has an empty token", s)
		case tok == "*" || tok == ">":
			return fmt.Errorf("%q has a wildcard: publish subjects name one subject", s)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("%q has white space", s)
		}
	}
	return nil
}
