package payloadtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/payload"
)

// Check decodes data into a payload.Payload strictly (unknown keys are
// errors, as is anything after the payload), validates it, encodes it
// again with encoding/json (HTML escaping off, as fieldwatch writes) and
// compares the two token by token: the same keys in the same order with
// the same values, the time being the same instant, which data must write
// in payload.TimeFormat. It returns the payload decoded.
func Check(data []byte) (payload.Payload, error) {
	var p payload.Payload
	dec := payload.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, err
	}
	if dec.More() {
		return p, errors.New("data after the payload")
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p); err != nil {
		return p, fmt.Errorf("encode: %w", err)
	}
	if err := sameTokens(data, b.Bytes()); err != nil {
		return p, fmt.Errorf("encoded again: %w\nwas:   %s\nagain: %s", err, data, b.Bytes())
	}
	return p, nil
}

// frame is a JSON object or list being walked: the key or index of the
// value being read.
type frame struct {
	object  bool
	key     string
	index   int
	wantKey bool
}

// sameTokens compares two JSON documents token by token; at the top-level
// key time it compares instants, and want's must be in TimeFormat.
func sameTokens(want, got []byte) error {
	dw, dg := json.NewDecoder(bytes.NewReader(want)), json.NewDecoder(bytes.NewReader(got))
	dw.UseNumber()
	dg.UseNumber()
	var stack []frame
	for {
		tw, errW := dw.Token()
		tg, errG := dg.Token()
		if errW == io.EOF && errG == io.EOF {
			return nil
		}
		at := pathOf(stack)
		if errW != nil || errG != nil {
			return fmt.Errorf("at %s: %v / %v", at, errW, errG)
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].object && stack[top].wantKey {
			if k, isKey := tw.(string); isKey {
				stack[top].key, stack[top].wantKey = k, false
				if tg != tw {
					return fmt.Errorf("at %s: key %q, encoded again %v", pathOf(stack), k, tg)
				}
				continue
			}
		}
		switch tw {
		case json.Delim('{'), json.Delim('['):
			if tg != tw {
				return fmt.Errorf("at %s: %v, encoded again %v", at, tw, tg)
			}
			stack = append(stack, frame{object: tw == json.Delim('{'), wantKey: true})
			continue
		case json.Delim('}'), json.Delim(']'):
			if tg != tw {
				return fmt.Errorf("at %s: %v, encoded again %v", at, tw, tg)
			}
			stack = stack[:top]
		default:
			if err := sameValue(at, top == 0 && stack[0].key == "time", tw, tg); err != nil {
				return err
			}
		}
		if n := len(stack) - 1; n >= 0 {
			stack[n].wantKey = true
			stack[n].index++
		}
	}
}

// sameValue compares two scalar tokens; times as instants.
func sameValue(at string, isTime bool, want, got json.Token) error {
	if !isTime {
		if want != got {
			return fmt.Errorf("at %s: %v, encoded again %v", at, want, got)
		}
		return nil
	}
	ws, _ := want.(string)
	gs, _ := got.(string)
	tw, errW := time.Parse(time.RFC3339Nano, ws)
	tg, errG := time.Parse(time.RFC3339Nano, gs)
	switch {
	case errW != nil || errG != nil:
		return fmt.Errorf("at %s: %v / %v", at, errW, errG)
	case !tw.Equal(tg):
		return fmt.Errorf("at %s: %s, encoded again %s", at, ws, gs)
	case ws != tw.UTC().Format(payload.TimeFormat):
		return fmt.Errorf("at %s: %s is not in payload.TimeFormat", at, ws)
	}
	return nil
}

// pathOf writes the location of the walk, such as changes[2].value.
func pathOf(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.object {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
		} else {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	if b.Len() == 0 {
		return "the top"
	}
	return b.String()
}
