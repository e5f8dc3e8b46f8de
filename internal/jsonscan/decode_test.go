package jsonscan

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// decodeCases are inputs whose decoding, or whose error, json.Unmarshal
// and Decode must agree on.
var decodeCases = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `1.5`, `-0.0`, `1e3`, `1E+3`, `1.5e-3`,
	`9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `-9223372036854775809`,
	`1e400`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `tru`, `nul`, `falsey`,
	`""`, `"a"`, `"héllo"`, `"\u00e9"`, `"\ud83d\ude00"`, `"\ud83d"`, `"\udc00x"`, `"a\"b"`, `"\\"`,
	`"\/\b\f\n\r\t"`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"\x01\"", "\"\xff\"", "\"a\xc3\"", "\"\xe2\x80\xa8\"",
	`"unterminated`, `"ends with backslash\`, `{"a":1,"a":2}`, `{"a":{"b":[1,{"c":null}]}}`,
	` { "a" : [ 1 , 2 ] } `, "\t\n\r{}\n", `{"a":1,}`, `[1,]`, `{"a" 1}`, `{1:2}`, `{"a":1} x`, `[1 2]`,
	`{"a":1`, `[`, `{`, ``, ` `, `{"a":}`, `[-]`, `{"\u0000k":"v"}`, `{"k\"":"v\\"}`,
	`{"metadata":{"name":"x","labels":{"app":"y"}},"data":{"n":"1","m":2,"f":2.5,"t":true}}`,
}

func TestDecodeIsUnmarshal(t *testing.T) {
	for _, in := range decodeCases {
		checkDecode(t, []byte(in))
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if _, err := Decode([]byte(deep)); err == nil {
		t.Errorf("Decode of %d nested arrays: no error", maxDepth+1)
	}
	ok := strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100)
	checkDecode(t, []byte(ok))
}

// checkDecode holds Decode of in to json.Unmarshal's: the same value, or
// both an error.
func checkDecode(t *testing.T, in []byte) {
	t.Helper()
	var want any
	wantErr := utiljson.Unmarshal(in, &want)
	got, err := Decode(in)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("Decode(%q): error %v, json.Unmarshal's %v", in, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode(%q) = %#v, json.Unmarshal: %#v", in, got, want)
	}
	var wantMap map[string]any
	wantErr = utiljson.Unmarshal(in, &wantMap)
	gotMap, err := DecodeObject(in)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeObject(%q): error %v, json.Unmarshal's %v", in, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(gotMap, wantMap) {
		t.Fatalf("DecodeObject(%q) = %#v, json.Unmarshal: %#v", in, gotMap, wantMap)
	}
	// DecodeShared: Decode's value and error, its strings in its input.
	shared, sharedErr := DecodeShared(bytes.Clone(in))
	plain, plainErr := Decode(in)
	if (sharedErr != nil) != (plainErr != nil) || (sharedErr == nil && !reflect.DeepEqual(shared, plain)) {
		t.Fatalf("DecodeShared(%q) = %#v, %v; Decode: %#v, %v", in, shared, sharedErr, plain, plainErr)
	}
}

func FuzzDecode(f *testing.F) {
	for _, in := range decodeCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, in)
	})
}

// BenchmarkDecode: Decode beside json.Unmarshal (apimachinery's) on a
// projected ConfigMap whose value is a 3.5 KB string (the drain's), and
// on an object of many short fields.
func BenchmarkDecode(b *testing.B) {
	long := []byte(`{"metadata":{"creationTimestamp":"2026-12-05T14:05:03Z","managedFields":[{"manager":"bench","operation":"Update"}]},"data":{"counter":"1796479501786062316-drain-558-` + strings.Repeat("x", 3500) + `"}}`)
	var fields strings.Builder
	fields.WriteString(`{"metadata":{"labels":{`)
	for i := range 50 {
		if i > 0 {
			fields.WriteByte(',')
		}
		fmt.Fprintf(&fields, `"label-%d":"value-%d"`, i, i)
	}
	fields.WriteString(`}},"spec":{"replicas":3,"ratio":0.5,"items":[1,2,3,"four",true,null]}}`)
	for _, in := range []struct {
		name string
		data []byte
	}{{"long-string", long}, {"many-fields", []byte(fields.String())}} {
		b.Run(in.name+"/Decode", func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				if _, err := DecodeObject(in.data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/json.Unmarshal", func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				var m map[string]any
				if err := utiljson.Unmarshal(in.data, &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPlainASCII: every byte value at every offset of strings up to 17
// bytes (the 8-byte words and the tail), against the byte-wise rule.
func TestPlainASCII(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for at := range n {
			for c := range 256 {
				s := []byte(strings.Repeat("a", n))
				s[at] = byte(c)
				want := c >= 0x20 && c != '"' && c != '\\' && c < 0x80
				if got := PlainASCII(string(s)); got != want {
					t.Fatalf("PlainASCII(%q) = %v, want %v", s, got, want)
				}
			}
		}
	}
}

// TestDecodeSharedShares: DecodeShared's strings are its input's bytes
// (a change to them shows), Decode's are copies.
func TestDecodeSharedShares(t *testing.T) {
	in := []byte(`{"key":"value"}`)
	shared, err := DecodeObjectShared(in)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := DecodeObject(in)
	if err != nil {
		t.Fatal(err)
	}
	copy(in[8:], "VALUE")
	if shared["key"] != "VALUE" || copied["key"] != "value" {
		t.Errorf("after the input changed: shared %q, copied %q; want VALUE, value", shared["key"], copied["key"])
	}
}
