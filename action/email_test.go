package action

import (
	"crypto/tls"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/fieldwatch/fieldwatch/rules"
)

// smtpServer is a real SMTP server (emersion/go-smtp) on 127.0.0.1 with
// STARTTLS and AUTH PLAIN required, that refuses the first refuse
// messages with 451 and keeps the others.
type smtpServer struct {
	addr   string
	ca     string // the CA file of its certificate
	refuse int

	mu       sync.Mutex
	attempts int
	msgs     []smtpMessage
	authed   []string
}

type smtpMessage struct {
	from string
	to   []string
	data []byte
	tls  bool
}

func newSMTPServer(t *testing.T, refuse int) *smtpServer {
	t.Helper()
	ca := newTestCA(t, "smtp-ca")
	certPEM, keyPEM, err := ca.ServerCert("smtp")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := &smtpServer{refuse: refuse, ca: filepath.Join(t.TempDir(), "ca.pem")}
	writeFile(t, srv.ca, string(ca.CertPEM))
	s := smtp.NewServer(srv)
	s.Domain = "localhost"
	s.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.ReadTimeout, s.WriteTimeout = 10*time.Second, 10*time.Second
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.addr = l.Addr().String()
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return srv
}

// NewSession implements smtp.Backend.
func (s *smtpServer) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &smtpSession{srv: s, conn: c}, nil
}

type smtpSession struct {
	srv  *smtpServer
	conn *smtp.Conn
	user string
	msg  smtpMessage
}

func (ss *smtpSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (ss *smtpSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(_, user, pass string) error {
		if user != "fw" || pass != "s3cret" {
			return errors.New("invalid credentials")
		}
		ss.user = user
		return nil
	}), nil
}

func (ss *smtpSession) Mail(from string, _ *smtp.MailOptions) error {
	if ss.user == "" {
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "authentication required"}
	}
	_, isTLS := ss.conn.TLSConnectionState()
	ss.msg = smtpMessage{from: from, tls: isTLS}
	return nil
}

func (ss *smtpSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.msg.to = append(ss.msg.to, to)
	return nil
}

func (ss *smtpSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.srv.mu.Lock()
	defer ss.srv.mu.Unlock()
	ss.srv.attempts++
	if ss.srv.attempts <= ss.srv.refuse {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try again later"}
	}
	ss.msg.data = b
	ss.srv.msgs = append(ss.srv.msgs, ss.msg)
	ss.srv.authed = append(ss.srv.authed, ss.user)
	return nil
}

func (ss *smtpSession) Reset()        {}
func (ss *smtpSession) Logout() error { return nil }

func (s *smtpServer) messages() []smtpMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]smtpMessage(nil), s.msgs...)
}

// TestEmail sends a group through STARTTLS and AUTH to a server that
// refuses twice (451) and then accepts: one message, with a text and an
// HTML part, for the whole group.
func TestEmail(t *testing.T) {
	srv := newSMTPServer(t, 2)
	h := newHarness(t, func(o *Options) { o.ExternalURL = "https://fw.example.com" })
	t.Setenv("FIELDWATCH_TEST_SMTP_PASSWORD", "s3cret")
	r := notifyRule("mail", rules.Action{Email: &rules.EmailAction{
		SMTP: srv.addr, From: "fieldwatch <fw@example.com>", To: []string{"ops@example.com", "Ünïcode <u@example.com>"},
		Username: "fw", Password: &rules.Secret{Env: "FIELDWATCH_TEST_SMTP_PASSWORD"}, CAFile: srv.ca,
		Notify: rules.Notify{Group: &rules.Group{Window: 50 * time.Millisecond}, RateLimit: &rules.RateLimit{Every: time.Millisecond}, Retry: fastRetry},
	}})
	dc := newDoneCounter(t)
	for i := range 12 {
		f := newFiring(r)
		if i == 0 {
			f.Object.Name = "виджет-<b>"
		}
		h.deliver(t, f, dc.fn(f.ID))
	}
	testenv.Eventually(t, 10*time.Second, "12 firings done", func() bool { return dc.total.Load() == 12 })
	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1 (the first two attempts refused)", len(msgs))
	}
	m := msgs[0]
	if !m.tls || m.from != "fw@example.com" || len(m.to) != 2 {
		t.Errorf("envelope %+v", m)
	}
	parsed, err := mail.ReadMessage(strings.NewReader(string(m.data)))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(parsed.Header.Get("Subject"))
	if err != nil || !strings.Contains(subject, "[fieldwatch] mail: 12 widgets in default updated") {
		t.Errorf("subject %q (%v)", subject, err)
	}
	mt, params, err := mime.ParseMediaType(parsed.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/alternative" {
		t.Fatalf("content type %q", parsed.Header.Get("Content-Type"))
	}
	parts := map[string]string{}
	mr := multipart.NewReader(parsed.Body, params["boundary"])
	for {
		p, err := mr.NextPart() // decodes quoted-printable
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		parts[ct] = string(b)
	}
	if !strings.Contains(parts["text/plain"], "Widget default/виджет-<b> updated") || !strings.Contains(parts["text/plain"], "and 2 more") {
		t.Errorf("text part:\n%s", parts["text/plain"])
	}
	if !strings.Contains(parts["text/html"], "виджет-&lt;b&gt;") || !strings.Contains(parts["text/html"], `href="https://fw.example.com/history/object?uid=`) {
		t.Errorf("HTML part:\n%s", parts["text/html"])
	}
	if len(h.deadLetters(t)) != 0 {
		t.Error("dead letters")
	}
}

// TestEmailRefusals checks what cannot be sent: a wrong password is
// retried (it may be rotated) then dead-lettered; a server without
// STARTTLS is refused at once.
func TestEmailRefusals(t *testing.T) {
	srv := newSMTPServer(t, 0)
	plain := smtp.NewServer(srv) // no TLS: no STARTTLS offered
	plain.Domain = "localhost"
	plain.AllowInsecureAuth = true
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = plain.Serve(l) }()
	t.Cleanup(func() { _ = plain.Close() })

	h := newHarness(t, nil)
	wrong := filepath.Join(t.TempDir(), "pw")
	writeFile(t, wrong, "wrong")
	base := rules.EmailAction{From: "fw@example.com", To: []string{"ops@example.com"}, Username: "fw", Password: &rules.Secret{File: wrong}, CAFile: srv.ca,
		Notify: rules.Notify{Group: &rules.Group{Window: time.Millisecond}, Retry: fastRetry}}
	bad, noTLS := base, base
	bad.SMTP, noTLS.SMTP = srv.addr, l.Addr().String()
	r := &rules.Rule{Name: "refused", Actions: []rules.Action{{Email: &bad}, {Email: &noTLS}}}
	dc := newDoneCounter(t)
	f := newFiring(r)
	h.deliver(t, f, dc.fn(f.ID))
	testenv.Eventually(t, 10*time.Second, "the firing done", func() bool { return dc.count(f.ID) == 1 })
	dls := h.deadLetters(t)
	if len(dls) != 2 {
		t.Fatalf("dead letters %+v", dls)
	}
	for _, dl := range dls {
		switch dl.Index {
		case 0:
			if dl.Attempts != fastRetry.Attempts || !strings.Contains(dl.Error, "auth:") || strings.Contains(dl.Error, "wrong") {
				t.Errorf("wrong password: %+v", dl)
			}
		case 1:
			if dl.Attempts != 1 || !strings.Contains(dl.Error, "does not offer STARTTLS") {
				t.Errorf("no STARTTLS: %+v", dl)
			}
		}
	}
}
