package action

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/smtp"
	"net/textproto"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/rules"
)

// email sends one message per group through SMTP (net/smtp): STARTTLS
// (required unless tls is none), or implicit TLS, then AUTH PLAIN when a
// username is set; a plain-text and an HTML part.
type email struct {
	spec    *rules.EmailAction
	host    string
	mode    string
	ca      *caBundle // nil: the system roots
	pass    *secretValue
	timeout time.Duration
	subject string
	to      []string // addresses alone, for RCPT TO
	from    string
}

var _ notifier = &email{}

// DefaultEmailTimeout bounds one SMTP session.
const DefaultEmailTimeout = 30 * time.Second

func newEmail(spec *rules.EmailAction) *email {
	e := &email{spec: spec, mode: spec.TLS, timeout: spec.Timeout, subject: spec.Subject}
	e.host, _, _ = net.SplitHostPort(spec.SMTP)
	if e.mode == "" {
		e.mode = rules.EmailSTARTTLS
	}
	if e.timeout <= 0 {
		e.timeout = DefaultEmailTimeout
	}
	if e.subject == "" {
		e.subject = "[fieldwatch]"
	}
	if spec.CAFile != "" {
		e.ca = &caBundle{file: spec.CAFile}
	}
	if spec.Password != nil {
		e.pass = newSecret(spec.Password)
	}
	if a, err := mail.ParseAddress(spec.From); err == nil {
		e.from = a.Address
	}
	for _, t := range spec.To {
		if a, err := mail.ParseAddress(t); err == nil {
			e.to = append(e.to, a.Address)
		}
	}
	return e
}

func (e *email) tlsConfig() (*tls.Config, error) {
	conf := &tls.Config{ServerName: e.host, MinVersion: tls.VersionTLS12}
	if e.ca != nil {
		pool, err := e.ca.get()
		if err != nil {
			return nil, err
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

func (e *email) send(ctx context.Context, d *digest) error {
	msg, err := e.message(d)
	if err != nil {
		return permanent(err)
	}
	conf, err := e.tlsConfig()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(e.timeout)
	dialer := &net.Dialer{Deadline: deadline}
	var conn net.Conn
	if e.mode == rules.EmailTLS {
		conn, err = (&tls.Dialer{NetDialer: dialer, Config: conf}).DialContext(ctx, "tcp", e.spec.SMTP)
	} else {
		conn, err = dialer.DialContext(ctx, "tcp", e.spec.SMTP)
	}
	if err != nil {
		return fmt.Errorf("smtp %s: %w", e.spec.SMTP, err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if err := e.session(conn, conf, msg); err != nil {
		return smtpError(e.spec.SMTP, err)
	}
	return nil
}

// session speaks SMTP on conn: EHLO, STARTTLS, AUTH, MAIL, RCPT, DATA,
// QUIT.
func (e *email) session(conn net.Conn, conf *tls.Config, msg []byte) error {
	c, err := smtp.NewClient(conn, e.host)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // after Quit, a no-op
	if err := c.Hello("fieldwatch"); err != nil {
		return err
	}
	if e.mode == rules.EmailSTARTTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return permanent(errors.New("the server does not offer STARTTLS (set tls: none for a loopback server without it)"))
		}
		if err := c.StartTLS(conf); err != nil {
			return err
		}
	}
	if e.spec.Username != "" {
		pw, err := e.pass.get()
		if err != nil {
			return fmt.Errorf("password: %w", err)
		}
		if err := c.Auth(smtp.PlainAuth("", e.spec.Username, pw, e.host)); err != nil {
			return fmt.Errorf("auth: %w", err)
		}
	}
	if err := c.Mail(e.from); err != nil {
		return err
	}
	for _, to := range e.to {
		if err := c.Rcpt(to); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write(msg); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return c.Quit()
}

// smtpError says what failed; a 5xx reply (other than to AUTH, whose
// secret may be rotated) is permanent, 4xx and network trouble are
// retried.
func smtpError(server string, err error) error {
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 && !strings.HasPrefix(err.Error(), "auth:") {
		return permanent(fmt.Errorf("smtp %s: %w", server, err))
	}
	if isPermanent(err) {
		return permanent(fmt.Errorf("smtp %s: %w", server, err))
	}
	return fmt.Errorf("smtp %s: %w", server, err)
}

// message renders d as a MIME message: multipart/alternative with a
// text/plain and a text/html part, both UTF-8, quoted-printable.
func (e *email) message(d *digest) ([]byte, error) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", e.spec.From)
	h("To", strings.Join(e.spec.To, ", "))
	h("Subject", mime.QEncoding.Encode("utf-8", e.subject+" "+truncateRunes(d.Summary, 200)))
	h("Date", time.Now().UTC().Format(time.RFC1123Z))
	sum := sha256.Sum256([]byte(d.Items[0].f.ID))
	h("Message-ID", "<"+hex.EncodeToString(sum[:12])+"@fieldwatch>")
	h("MIME-Version", "1.0")
	h("Content-Type", "multipart/alternative; boundary="+mw.Boundary())
	b.WriteString("\r\n")
	for _, part := range []struct {
		ctype string
		body  func(*bytes.Buffer) error
	}{
		{"text/plain; charset=utf-8", func(w *bytes.Buffer) error { emailText(w, d); return nil }},
		{"text/html; charset=utf-8", func(w *bytes.Buffer) error { return emailHTML.Execute(w, d) }},
	} {
		pw, err := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {part.ctype}, "Content-Transfer-Encoding": {"quoted-printable"}})
		if err != nil {
			return nil, err
		}
		var body bytes.Buffer
		if err := part.body(&body); err != nil {
			return nil, fmt.Errorf("email body: %w", err)
		}
		qp := quotedprintable.NewWriter(pw)
		if _, err := qp.Write(body.Bytes()); err != nil {
			return nil, err
		}
		if err := qp.Close(); err != nil {
			return nil, err
		}
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// emailText writes the plain-text part.
func emailText(w *bytes.Buffer, d *digest) {
	fmt.Fprintf(w, "%s\n\nrule: %s\n", d.Summary, d.Rule)
	if d.Cluster != "" {
		fmt.Fprintf(w, "cluster: %s\n", d.Cluster)
	}
	for _, e := range d.Entries {
		fmt.Fprintf(w, "\n%s\n", e.Title)
		for _, c := range e.Changes {
			fmt.Fprintf(w, "  %s\n", c.text())
		}
		if e.MoreChanges > 0 {
			fmt.Fprintf(w, "  and %d more changes\n", e.MoreChanges)
		}
		if e.CRD != "" {
			fmt.Fprintf(w, "  %s\n", e.CRD)
		}
		if e.Link != "" {
			fmt.Fprintf(w, "  history: %s\n", e.Link)
		}
	}
	if more := d.MoreLine(); more != "" {
		fmt.Fprintf(w, "\n%s\n", more)
	}
	if d.Link != "" {
		fmt.Fprintf(w, "\n%s\n", d.Link)
	}
}

// emailHTML is the HTML part; html/template escapes every value.
var emailHTML = template.Must(template.New("email").Parse(`<!DOCTYPE html>
<html><body style="font-family: sans-serif">
<h2>{{.Summary}}</h2>
<p>rule <b>{{.Rule}}</b>{{if .Cluster}} · cluster <b>{{.Cluster}}</b>{{end}}{{if .Link}} · <a href="{{.Link}}">history</a>{{end}}</p>
{{range .Entries}}<h3>{{if .Link}}<a href="{{.Link}}">{{.Kind}} {{if .Namespace}}{{.Namespace}}/{{end}}{{.Name}}</a>{{else}}{{.Kind}} {{if .Namespace}}{{.Namespace}}/{{end}}{{.Name}}{{end}} {{.Type}}{{if .Who}} by {{.Who}}{{end}}</h3>
{{if .Changes}}<table style="border-collapse: collapse">{{range .Changes}}<tr><td><code>{{.Path}}</code></td><td><code>{{.Old}}</code></td><td>→</td><td><code>{{.New}}</code></td></tr>{{end}}</table>{{end}}
{{if .MoreChanges}}<p>and {{.MoreChanges}} more changes</p>{{end}}{{if .CRD}}<p>{{.CRD}}</p>{{end}}
{{end}}{{with .MoreLine}}<p><i>{{.}}</i></p>{{end}}
</body></html>
`))
