package jsonscan

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestObjectHash(t *testing.T) {
	const base = `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","generation":2,` +
		`"managedFields":[{"manager":"kubectl","operation":"Update","time":"2026-01-01T00:00:00Z","fieldsV1":{"f:data":{}}}]},"data":{"k":"v","n":"1"}}`
	tests := []struct {
		name string
		in   string
		same bool // hashes as base
	}{
		{"itself", base, true},
		{"keys in another order, white space", `{ "kind":"ConfigMap", "data":{"n":"1","k":"v"}, "metadata":{"uid":"u","namespace":"n","name":"a",` +
			`"managedFields":[{"time":"2026-01-01T00:00:00Z","operation":"Update","manager":"kubectl","fieldsV1":{"f:data":{}}}],"generation":2,"resourceVersion":"5"}, "apiVersion":"v1" }`, true},
		{"escaped strings", `{"apiVersion":"v1","kind":"Config\u004dap","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"5","generation":2,` +
			`"managedFields":[{"manager":"kubectl","operation":"Update","time":"2026-01-01T00:00:00Z","fieldsV1":{"f:data":{}}}]},"data":{"\u006b":"v","n":"1"}}`, true},
		{"another resourceVersion, generation and managedFields time", strings.NewReplacer(`"5"`, `"6"`, `"generation":2`, `"generation":3`,
			"2026-01-01T00:00:00Z", "2026-01-01T00:00:09Z").Replace(base), true},
		{"another apiVersion", strings.Replace(base, `"apiVersion":"v1"`, `"apiVersion":"v2"`, 1), true},
		{"no resourceVersion, generation, apiVersion", strings.NewReplacer(`"resourceVersion":"5",`, "", `"generation":2,`, "", `"apiVersion":"v1",`, "").Replace(base), true},
		{"another value", strings.Replace(base, `"k":"v"`, `"k":"w"`, 1), false},
		{"a value's type", strings.Replace(base, `"n":"1"`, `"n":1`, 1), false},
		{"another uid", strings.Replace(base, `"uid":"u"`, `"uid":"x"`, 1), false},
		{"another manager", strings.Replace(base, `"kubectl"`, `"helm"`, 1), false},
		{"a time outside managedFields", strings.Replace(base, `"data":{"k":"v"`, `"data":{"time":"v"`, 1), false},
		{"resourceVersion outside metadata", strings.Replace(base, `"data":{"k":"v"`, `"data":{"resourceVersion":"v"`, 1), false},
		{"a key moved into a value", strings.Replace(base, `"k":"v","n":"1"`, `"k":"v\",\"n\":\"1"`, 1), false},
		{"an empty object for a missing one", strings.Replace(base, `"data":{"k":"v","n":"1"}`, `"data":{"k":"v","n":"1"},"x":{}`, 1), false},
		{"null for a missing value", strings.Replace(base, `"data":{"k":"v","n":"1"}`, `"data":{"k":"v","n":"1"},"x":null`, 1), false},
	}
	want, err := ObjectHash([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 32 {
		t.Fatalf("hash %q: want 32 hex digits", want)
	}
	for _, tc := range tests {
		got, err := ObjectHash([]byte(tc.in))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if (got == want) != tc.same {
			t.Errorf("%s: hash %s, base's %s: want same %v", tc.name, got, want, tc.same)
		}
	}
}

func TestObjectHashErrors(t *testing.T) {
	for _, in := range []string{``, `[]`, `"a"`, `null`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1} x`, `{"a":[1,]}`,
		`{"a":[1 2]}`, `{"a":"unterminated}`, `{"a":tru}`, `{1:2}`, `{"a":"\u12"}`, strings.Repeat(`{"a":`, maxDepth+2) + "1" + strings.Repeat("}", maxDepth+2)} {
		if h, err := ObjectHash([]byte(in)); err == nil {
			t.Errorf("ObjectHash(%.40q) = %s, want an error", in, h)
		}
	}
}

// FuzzObjectHash holds ObjectHash of any JSON object to that of the same
// object decoded and encoded again by encoding/json (keys sorted, strings
// escaped its way, numbers kept as written).
func FuzzObjectHash(f *testing.F) {
	for _, s := range decodeCases {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"metadata":{"b":1,"a":{"y":[{"time":"t","x":2}],"x":"\u00e9"}},"apiVersion":"v"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if !utf8.Valid(in) || duplicateKeys(in) {
			return // json.Unmarshal repairs or drops what ObjectHash keeps
		}
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		var v map[string]any
		if err := dec.Decode(&v); err != nil || v == nil {
			return
		}
		if _, err := dec.Token(); err != io.EOF {
			return
		}
		again, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		h1, err1 := ObjectHash(in)
		h2, err2 := ObjectHash(again)
		if err1 != nil || err2 != nil || h1 != h2 {
			t.Fatalf("ObjectHash(%q) = %s, %v; of %q: %s, %v", in, h1, err1, again, h2, err2)
		}
	})
}

// duplicateKeys reports whether an object of data repeats a key.
func duplicateKeys(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		keys   map[string]bool
		key    bool // the next string token is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		isKey := top != nil && top.object && top.key
		switch v := tok.(type) {
		case json.Delim:
			if top != nil && top.object && !isKey {
				top.key = true
			}
			switch v {
			case '{':
				stack = append(stack, &frame{object: true, keys: map[string]bool{}, key: true})
			case '[':
				stack = append(stack, &frame{})
			default:
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
			}
			continue
		case string:
			if isKey {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}

// BenchmarkObjectHash is the digest of a 4 KB object, beside decoding it
// into maps (what building the object to hash it would cost at least).
func BenchmarkObjectHash(b *testing.B) {
	obj := benchObject()
	b.Run("hash", func(b *testing.B) {
		b.SetBytes(int64(len(obj)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ObjectHash(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(obj)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeObject(obj); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchObject is a ConfigMap of about 4 KB with managedFields, as a watch
// event carries it.
func benchObject() []byte {
	data := map[string]string{}
	for i := range 40 {
		data["key-"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('a'+i/26))] = strings.Repeat("value ", 12)
	}
	obj := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": "bench", "namespace": "default", "uid": "0b7c7a2e-8a0e-4d5e-9f8e-1c2d3e4f5a6b", "resourceVersion": "123456",
			"creationTimestamp": "2026-01-01T00:00:00Z", "labels": map[string]string{"app": "bench", "tier": "backend"},
			"managedFields": []any{map[string]any{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
				"time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:key-a": map[string]any{}}}}},
		},
		"data": data,
	}
	b, _ := json.Marshal(obj)
	return b
}

// FuzzSkipString holds skipString to a scan byte by byte.
func FuzzSkipString(f *testing.F) {
	for _, s := range []string{`"a"`, `"a\"b"`, `"\\"`, `"\\\"x"`, `"unterminated`, `"ends\`, `""`, `"a\\\\"b"`, `"\u00e9"rest`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || in[0] != '"' {
			return
		}
		want, wantErr := 0, error(ErrSyntax)
		for j := 1; j < len(in); j++ {
			if in[j] == '\\' {
				j++
				continue
			}
			if in[j] == '"' {
				want, wantErr = j+1, nil
				break
			}
		}
		got, err := skipString(in, 0)
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("skipString(%q) = %d, %v; byte by byte %d, %v", in, got, err, want, wantErr)
		}
	})
}
