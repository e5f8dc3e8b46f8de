package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// hostileTemplates loop or grow without bound; Render stops each.
var hostileTemplates = []struct{ name, src string }{
	{"range over a huge number, writing", `{{range 1000000000}}x{{end}}`},
	{"range over a huge number, silent", `{{range 1000000000}}{{end}}`},
	{"nested ranges over the changes", `{{range 1000}}{{range 1000}}{{range 1000}}{{end}}{{end}}{{end}}`},
	{"recursive template, exponential", `{{define "r"}}{{if .}}{{template "r" (slice . 1)}}{{template "r" (slice . 1)}}{{end}}{{end}}{{template "r" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`},
	{"doubling a variable", `{{$x := "xx"}}{{range 64}}{{$x = printf "%s%s" $x $x}}{{end}}{{len $x}}`},
	{"escaping a growing variable", `{{$x := "&&&&"}}{{range 64}}{{$x = html $x $x}}{{end}}{{len $x}}`},
	{"joining with a growing separator", `{{$x := "&&&&"}}{{range 64}}{{$x = join $x $.l}}{{end}}`},
}

func TestRenderStopsHostileTemplates(t *testing.T) {
	testenv.SkipShort(t, testenv.LoadTest)
	payload := []byte(`{"rule":"r","l":[1,2,3],"changes":[{"op":"replace","path":"/a","value":1,"oldValue":0}]}`)
	for _, tt := range hostileTemplates {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := ParseTemplate("t", tt.src, false)
			if err != nil {
				t.Fatal(err)
			}
			var out []byte
			cpu := testenv.SpentCPU(t, func() { out, err = tmpl.Render(payload) })
			if !errors.Is(err, errTemplateTooLarge) && !errors.Is(err, errTemplateTooLong) && !errors.Is(err, errTemplateTooSlow) {
				t.Errorf("Render = %d bytes, %v; want it stopped at a limit", len(out), err)
			} else if !strings.HasPrefix(err.Error(), "template t: stopped: ") {
				t.Errorf("error %q does not say the template was stopped", err)
			}
			// Limits: 1,000,000 steps, 1 s, 4 MiB; generous for -race.
			if cpu > 10*time.Second {
				t.Errorf("Render took %v of CPU", cpu)
			}
		})
	}
}

// TestRenderOrdinaryTemplates: the limits leave ordinary templates alone,
// the replaced functions included.
func TestRenderOrdinaryTemplates(t *testing.T) {
	payload := []byte(`{"rule":"r","name":"a&b","changes":[{"op":"replace","path":"/a","value":1},{"op":"add","path":"/b","value":"x"}],"m":{"k":"v","j":1},"e":[]}`)
	for src, want := range map[string]string{
		`{{range .changes}}{{.path}} {{end}}`:                                         "/a /b ",
		`{{printf "%s=%v" .rule 1}} {{print .rule 2}} {{println .rule}}`:              "r=1 r2 r\n",
		`{{html .name}} {{js .name}} {{urlquery .name}}`:                              `a&amp;b a\u0026b a%26b`,
		`{{define "p"}}<{{.path}}>{{end}}{{range .changes}}{{template "p" .}}{{end}}`: "</a></b>",
		`{{json .changes}}`:                                                       `[{"op":"replace","path":"/a","value":1},{"op":"add","path":"/b","value":"x"}]`,
		`{{range 3}}{{.}}{{else}}none{{end}}`:                                     "012",
		`{{range $k, $v := .m}}{{$k}}={{$v}} {{end}}`:                             "j=1 k=v ",
		`{{range .missing}}x{{else}}none{{end}}{{range .e}}x{{else}}empty{{end}}`: "noneempty",
		`{{range $i, $c := .changes}}{{if $i}},{{end}}{{$c.op}}{{break}}{{end}}`:  "replace",
	} {
		tmpl, err := ParseTemplate("t", src, false)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tmpl.Render(payload)
		if err != nil || string(out) != want {
			t.Errorf("Render(%s) = %q, %v; want %q", src, out, err, want)
		}
	}
}

// BenchmarkTemplateRange renders a range over n, writing a byte each
// iteration: the cost is capped at MaxTemplateOutput.
func BenchmarkTemplateRange(b *testing.B) {
	payload := []byte(`{"rule":"r"}`)
	for _, n := range []int{1_000_000, 10_000_000, 1_000_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			tmpl, err := ParseTemplate("t", fmt.Sprintf("{{range %d}}x{{end}}", n), false)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tmpl.Render(payload)
			}
		})
	}
}

// TestTemplateErrorsQuoteNoValue: a template that fails on the payload
// says the type of the value it could not use, never the value, which
// may be a Secret's data. text/template quoted it (range can't iterate
// over SECRETVALUE), and so did the check of a JSON template's output.
func TestTemplateErrorsQuoteNoValue(t *testing.T) {
	payload := []byte(`{"name":"SECRETVALUE","n":42424242,"b":true,"l":["SECRETVALUE"]}`)
	tests := []struct {
		src  string
		json bool
		want string
	}{
		{`{{range .name}}{{end}}`, false, `template t: template: t:1:8: executing "t" at <range>: error calling range: can't iterate over a value of type string`},
		{`{{range $i, $c := .n}}{{$c}}{{end}}`, false, "can't iterate over a value of type number"},
		{`{{range .b}}{{else}}none{{end}}`, false, "can't iterate over a value of type bool"},
		{`{{range .l}}{{range .}}{{end}}{{end}}`, false, "can't iterate over a value of type string"},
		{`{"name": {{.name}}}`, true, "template t: output is not valid JSON: 21 bytes, invalid from byte 10"},
		{`{"name": {{json .name}}`, true, "template t: output is not valid JSON: 22 bytes, invalid from byte 22"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			tmpl, err := ParseTemplate("t", tt.src, tt.json)
			if err != nil {
				t.Fatal(err)
			}
			out, err := tmpl.Render(payload)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Render = %q, %v; want an error containing %q", out, err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "SECRETVALUE") || strings.Contains(err.Error(), "42424242")) {
				t.Errorf("the error quotes a value: %v", err)
			}
		})
	}
}
