package validate

import (
	"context"
	"fmt"
	"testing"

	"github.com/fieldwatch/fieldwatch/crd/diff"
)

// BenchmarkCRD validates CRDs of 500 object fields, each with or without
// a CEL rule, side by side: the apiserver's validation compiles every
// rule (and builds a CEL environment for every schema node that has
// them), which is most of its cost.
func BenchmarkCRD(b *testing.B) {
	for _, rules := range []bool{false, true} {
		src := valid[:len(valid)-len("                size: {type: integer}\n")]
		for i := 0; i < 500; i++ {
			rule := ""
			if rules {
				rule = `, x-kubernetes-validations: [{rule: "!has(self.a) || self.a.size() <= self.b", message: too long}]`
			}
			src += fmt.Sprintf("                f%03d: {type: object, properties: {a: {type: string, maxLength: 64}, b: {type: integer}}%s}\n", i, rule)
		}
		docs, err := diff.Parse("crd.yaml", []byte(src))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("fields=500/cel-rules=%v", rules), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if errs := CRD(context.Background(), docs[0].CRD); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}
