package validate

import (
	"context"
	"errors"
	"fmt"
	"github.com/fieldwatch/fieldwatch/fileerr"
	"strings"

	"github.com/fieldwatch/fieldwatch/crd/diff"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CRD validates crd as kube-apiserver validates its create: the errors the
// apiserver would refuse it with, none when it would accept it. crd is not
// modified.
//
// It runs k8s.io/apiextensions-apiserver's
// pkg/apis/apiextensions/validation (the release in go.mod): names
// (metadata.name must be plural.group), scope, versions (exactly one
// storage version, served versions with a schema), structural schemas
// (every node with a type, defaults pruned and valid, list types, CEL rules
// that compile within their cost budget), the conversion and the
// subresources. The defaults the apiserver applies before it validates
// (listKind, conversion None, status.storedVersions from the storage
// version) are applied to a copy first; the status of the input is ignored,
// as the apiserver ignores it on a create.
func CRD(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	c := crd.DeepCopy()
	c.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(c)
	internal := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(c, internal, nil); err != nil {
		return field.ErrorList{field.InternalError(nil, fmt.Errorf("convert CustomResourceDefinition: %w", err))}
	}
	return validation.ValidateCustomResourceDefinition(ctx, internal)
}

// Documents validates the CRDs of docs (CRD) and refuses a CRD name that
// appears twice. Each error is a *fileerr.Error at the field it is about.
//
// Compiling the CEL rules takes most of the validation's time, about a
// millisecond a rule (BenchmarkCRD), as it does the apiserver's.
func Documents(ctx context.Context, docs []diff.Document) error {
	found := make([]field.ErrorList, len(docs))
	for i, d := range docs {
		found[i] = CRD(ctx, d.CRD)
	}
	var errs []error
	first := map[string]diff.Document{}
	for i, d := range docs {
		for _, e := range found[i] {
			path := versionPath(d.CRD, e.Field)
			fe := &fileerr.Error{File: d.File, Path: path, Msg: e.ErrorBody()}
			fe.Line, fe.Col = d.Locate(path)
			errs = append(errs, fe)
		}
		name := d.CRD.Name
		if name == "" {
			continue // the validation says it
		}
		if f, ok := first[name]; ok {
			line, col := d.Locate("metadata.name")
			errs = append(errs, &fileerr.Error{File: d.File, Line: line, Col: col, Path: "metadata.name",
				Msg: fmt.Sprintf("CustomResourceDefinition %s appears twice (first at %s:%d): which one is meant cannot be told", name, f.File, f.Line)})
			continue
		}
		first[name] = d
	}
	return errors.Join(errs...)
}

// versionPath rewrites the path of an error about what the apiserver's
// internal CRD type keeps once for every version (spec.validation,
// spec.subresources, spec.additionalPrinterColumns, spec.selectableFields:
// set when every version has the same) to the first version's field, as
// the apiextensions.k8s.io/v1 manifest has it.
func versionPath(crd *apiextensionsv1.CustomResourceDefinition, path string) string {
	for _, f := range []struct{ internal, v1 string }{
		{"spec.validation", "schema"},
		{"spec.subresources", "subresources"},
		{"spec.additionalPrinterColumns", "additionalPrinterColumns"},
		{"spec.selectableFields", "selectableFields"},
	} {
		rest, ok := strings.CutPrefix(path, f.internal)
		if !ok || (rest != "" && rest[0] != '.' && rest[0] != '[') || len(crd.Spec.Versions) == 0 {
			continue
		}
		return "spec.versions[0]." + f.v1 + rest
	}
	return path
}
