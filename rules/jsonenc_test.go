package rules

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

// payloadParts returns what a firing's payload encodes, in order: the
// strings of its fixed keys, each change's op, path, value and oldValue,
// the actor and, with includeObject, both objects. Encoding each with
// appendJSON or with encoding/json is the whole difference jsonenc.go
// makes to building a payload.
func payloadParts(includeObject bool) []any {
	old, new := benchWidget(3, "100"), benchWidget(4, "101")
	parts := []any{
		"6f1c2a52-94c3-4b7e-a1d2-3c4d5e6f7a8b/101/widget-resized", "widget-resized", "updated",
		"example.com", "v1", "widgets", "Widget", "shop", "web-1", "6f1c2a52-94c3-4b7e-a1d2-3c4d5e6f7a8b", "101",
		"replace", "/spec/size", int64(4), int64(3),
		"replace", "/metadata/generation", int64(4), int64(3),
		"kubectl", "Apply",
	}
	if includeObject {
		parts = append(parts, new, old)
	}
	return parts
}

// stdAppend is what appendJSON would be without jsonenc.go: encoding/json
// with HTML escaping off.
func stdAppend(b []byte, v any) ([]byte, error) { return appendStdJSON(b, v) }

// BenchmarkPayloadJSON encodes the parts of realistic payloads (a small
// update, and the same with includeObject and a 5 KiB object) with the
// hand-written encoder and with encoding/json, side by side.
func BenchmarkPayloadJSON(b *testing.B) {
	for _, payload := range []struct {
		name  string
		parts []any
	}{{"small-update", payloadParts(false)}, {"5KiB-includeObject", payloadParts(true)}} {
		for _, enc := range []struct {
			name string
			fn   func([]byte, any) ([]byte, error)
		}{{"jsonenc", appendJSON}, {"encoding-json", stdAppend}} {
			b.Run(payload.name+"/"+enc.name, func(b *testing.B) {
				buf := make([]byte, 0, 16<<10)
				b.ReportAllocs()
				for b.Loop() {
					buf = buf[:0]
					for _, p := range payload.parts {
						var err error
						if buf, err = enc.fn(buf, p); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.SetBytes(int64(len(buf)))
			})
		}
	}
}

// FuzzAppendJSON checks appendJSON against encoding/json on random
// JSON-like trees: the output must be byte-identical to encoding/json's
// with HTML escaping off (appendJSON's contract), and so decode to the
// same value; values encoding/json rejects (NaN, infinities) must be
// rejected too.
func FuzzAppendJSON(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x07\x03\x01ab\x04\x02x\x00\x06\x02\x02\x00\x00\x00\x00\x00\x00\xf0\x3f\x01\x01"))
	f.Add([]byte("\x04\x05<a>&\xe2\x80\xa8"))
	f.Add([]byte("\x04\x04\xff\x7f\"\\"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\xf8\x7f"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00\x80"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, _ := genJSON(data, 0)
		got, gotErr := appendJSON(nil, v)
		want, wantErr := stdAppend(nil, v)
		if (gotErr != nil) != (wantErr != nil) {
			t.Fatalf("%#v: appendJSON error %v, encoding/json error %v", v, gotErr, wantErr)
		}
		if wantErr != nil {
			return
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%#v:\nappendJSON    %s\nencoding/json %s", v, got, want)
		}
		var gv, wv any
		if err := json.Unmarshal(got, &gv); err != nil {
			t.Fatalf("appendJSON output %s does not decode: %v", got, err)
		}
		if err := json.Unmarshal(want, &wv); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(gv, wv) {
			t.Fatalf("decoded values differ: %#v, %#v", gv, wv)
		}
	})
}

// genJSON builds a JSON-like tree (map[string]any, []any, string,
// float64, int64, bool, nil) from fuzz bytes and returns the bytes left.
func genJSON(data []byte, depth int) (any, []byte) {
	if len(data) == 0 {
		return nil, nil
	}
	kind, data := data[0], data[1:]
	if depth > 8 && kind%8 >= 6 {
		kind = 0 // bound the nesting
	}
	switch kind % 8 {
	case 1:
		if len(data) == 0 {
			return false, nil
		}
		return data[0]&1 == 1, data[1:]
	case 2:
		var raw [8]byte
		n := copy(raw[:], data)
		return math.Float64frombits(binary.LittleEndian.Uint64(raw[:])), data[n:]
	case 3:
		if len(data) == 0 {
			return 0.0, nil
		}
		return float64(int8(data[0])) / 4, data[1:]
	case 4:
		return genString(data)
	case 5:
		var raw [8]byte
		n := copy(raw[:], data)
		return int64(binary.LittleEndian.Uint64(raw[:])), data[n:]
	case 6:
		if len(data) == 0 {
			return []any{}, nil
		}
		n := int(data[0] % 5)
		data = data[1:]
		l := make([]any, n)
		for i := range l {
			l[i], data = genJSON(data, depth+1)
		}
		return l, data
	case 7:
		if len(data) == 0 {
			return map[string]any{}, nil
		}
		n := int(data[0] % 5)
		data = data[1:]
		m := make(map[string]any, n)
		for range n {
			var k any
			k, data = genString(data)
			m[k.(string)], data = genJSON(data, depth+1)
		}
		return m, data
	}
	return nil, data
}

// genString takes a length byte and that many bytes (any bytes: invalid
// UTF-8, control characters, quotes, HTML) as a string.
func genString(data []byte) (any, []byte) {
	if len(data) == 0 {
		return "", nil
	}
	n := min(int(data[0]%32), len(data)-1)
	return string(data[1 : 1+n]), data[1+n:]
}
