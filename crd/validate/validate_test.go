package validate

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/crd/diff"
)

const valid = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
`

// TestDocuments runs the input kube-apiserver refuses through Documents:
// each case is an edit of a valid CRD and the FILE:LINE:COL error it must
// give (a regular expression).
func TestDocuments(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string // "" when valid
	}{
		{name: "valid", src: valid},
		{name: "no storage version", src: strings.Replace(valid, "storage: true", "storage: false", 1),
			want: `^crd\.yaml:9:3: spec\.versions: Invalid value: .*must have exactly one version marked as storage version`},
		{name: "a served version without a schema", src: valid[:strings.Index(valid, "      schema:")],
			want: `^crd\.yaml:10:7: spec\.versions\[0\]\.schema\.openAPIV3Schema: Required value`},
		{name: "properties without a type", src: strings.Replace(valid, "              type: object\n              properties:\n                size", "              properties:\n                size", 1),
			want: `^crd\.yaml:17:13: spec\.versions\[0\]\.schema\.openAPIV3Schema\.properties\[spec\]\.type: Required value: must not be empty for specified object fields`},
		{name: "no metadata.name", src: strings.Replace(valid, "  name: widgets.example.com\n", "  labels: {a: b}\n", 1),
			want: `^crd\.yaml:3:1: metadata\.name: Required value: name or generateName is required`},
		{name: "a name that is not plural.group", src: strings.Replace(valid, "name: widgets.example.com", "name: gadgets.example.com", 1),
			want: `^crd\.yaml:4:9: metadata\.name: Invalid value: "gadgets\.example\.com": must be spec\.names\.plural\+"\."\+spec\.group`},
		{name: "the same CRD twice", src: valid + "---\n" + valid,
			want: `^crd\.yaml:25:9: metadata\.name: CustomResourceDefinition widgets\.example\.com appears twice \(first at crd\.yaml:1\)`},
		{name: "a CEL rule that does not compile", src: strings.Replace(valid, "size: {type: integer}", "size: {type: integer, x-kubernetes-validations: [{rule: \"self >\"}]}", 1),
			want: `^crd\.yaml:20:\d+: spec\.versions\[0\]\.schema\.openAPIV3Schema\.properties\[spec\]\.properties\[size\]\.x-kubernetes-validations\[0\]\.rule: Invalid value: .*compilation failed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			docs, err := diff.Parse("crd.yaml", []byte(tt.src))
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = Documents(context.Background(), docs)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("valid CRD refused: %v", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("accepted, want %s", tt.want)
			case !regexp.MustCompile(tt.want).MatchString(err.Error()):
				t.Fatalf("error:\n%v\nwant it to match %s", err, tt.want)
			}
		})
	}
}
