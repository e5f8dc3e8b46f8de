package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
)

// Unmarshal decodes data, which must hold one payload and nothing else,
// into p (reset first) and checks it with Validate. Keys it does not know
// are ignored, so that a receiver keeps reading the payloads of a newer
// fieldwatch, which may add keys; use a Decoder with
// DisallowUnknownFields to reject them.
func Unmarshal(data []byte, p *Payload) error {
	d := NewDecoder(bytes.NewReader(data))
	if err := d.Decode(p); err != nil {
		return err
	}
	if _, err := d.dec.Token(); err != io.EOF {
		return errors.New("payload: data after the payload")
	}
	return nil
}

// Decoder reads payloads one after the other from a stream, such as the
// JSON lines of the log action.
type Decoder struct {
	dec *json.Decoder
}

// NewDecoder returns a Decoder reading from r. It may read beyond the
// payloads it returns (it buffers).
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{dec: json.NewDecoder(r)}
}

// DisallowUnknownFields makes Decode fail on a key no field of Payload
// (or of its parts) has: for tests that hold an encoder to this type.
func (d *Decoder) DisallowUnknownFields() { d.dec.DisallowUnknownFields() }

// More reports whether there is another value to decode.
func (d *Decoder) More() bool { return d.dec.More() }

// Decode reads the next payload into p (reset first) and checks it with
// Validate. It returns io.EOF at the end of the stream; after a syntax
// error the stream cannot be read further.
func (d *Decoder) Decode(p *Payload) error {
	*p = Payload{}
	if err := d.dec.Decode(p); err != nil {
		if err == io.EOF {
			return err
		}
		return fmt.Errorf("payload: %w", err)
	}
	return p.Validate()
}

// Validate checks what docs/payload.md promises of every payload and a
// decoder alone cannot: that id, time, rule, type, resource, name, uid,
// resourceVersion and changes are set, id is made of uid, resourceVersion
// (or "deleted") and rule, type is one of the three, each change has an op
// of the three, a JSON Pointer path and the values its op has (no value
// for a remove, no oldValue for an add), an actor has a manager or a
// match, object and oldObject are JSON objects where the type allows them
// (no object for a deletion, no oldObject for a creation), and a crd has
// its name. Values a newer fieldwatch may add to (observed, match, a
// check's name, severity, effect) are not checked. It names the first
// problem found, with its key.
func (p *Payload) Validate() error {
	if err := p.validate(); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	return nil
}

func (p *Payload) validate() error {
	for _, f := range []struct{ key, value string }{
		{"id", p.ID}, {"rule", p.Rule}, {"resource.version", p.Resource.Version},
		{"resource.resource", p.Resource.Resource}, {"resource.kind", p.Resource.Kind},
		{"name", p.Name}, {"uid", p.UID}, {"resourceVersion", p.ResourceVersion},
	} {
		if f.value == "" {
			return fmt.Errorf("%s: missing or empty", f.key)
		}
	}
	if p.Time.IsZero() {
		return errors.New("time: missing or zero")
	}
	switch p.Type {
	case change.Created, change.Updated, change.Deleted:
	default:
		return fmt.Errorf("type: %q is not created, updated or deleted", p.Type)
	}
	if want := p.wantID(); p.ID != want {
		return fmt.Errorf("id: %q, want %q (uid, resourceVersion or deleted, rule)", p.ID, want)
	}
	if p.Changes == nil {
		return errors.New("changes: missing or null")
	}
	for i := range p.Changes {
		if err := p.Changes[i].validate(); err != nil {
			return fmt.Errorf("changes[%d]: %w", i, err)
		}
	}
	if a := p.Actor; a != nil && a.Manager == "" && a.Match == "" {
		return errors.New("actor: neither manager nor match")
	}
	if c := p.CRD; c != nil {
		if c.Name == "" {
			return errors.New("crd.crd: missing or empty")
		}
		if c.Checks == nil || c.Impact == nil {
			return errors.New("crd: checks or impact missing or null")
		}
	}
	for _, o := range []struct {
		key   string
		value json.RawMessage
		not   change.Type
	}{{"object", p.Object, change.Deleted}, {"oldObject", p.OldObject, change.Created}} {
		switch {
		case o.value == nil:
		case p.Type == o.not:
			return fmt.Errorf("%s: present in a %s payload", o.key, p.Type)
		case !isObject(o.value):
			return fmt.Errorf("%s: not a JSON object", o.key)
		}
	}
	return nil
}

// wantID is the id p's uid, resourceVersion, type and rule make.
func (p *Payload) wantID() string {
	if p.Type == change.Deleted {
		return p.UID + "/deleted/" + p.Rule
	}
	return p.UID + "/" + p.ResourceVersion + "/" + p.Rule
}

func (c *Change) validate() error {
	if c.Path != "" && !strings.HasPrefix(c.Path, "/") {
		return fmt.Errorf("path: %q is not a JSON Pointer", c.Path)
	}
	hasValue, hasOld := c.Value != nil, c.OldValue != nil
	switch c.Op {
	case OpAdd:
		if !hasValue || hasOld {
			return errors.New("an add has a value and no oldValue")
		}
	case OpRemove:
		if hasValue || !hasOld {
			return errors.New("a remove has an oldValue and no value")
		}
	case OpReplace:
		if !hasValue || !hasOld {
			return errors.New("a replace has a value and an oldValue")
		}
	default:
		return fmt.Errorf("op: %q is not add, remove or replace", c.Op)
	}
	return nil
}

// isObject reports whether the JSON value v is an object.
func isObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}
