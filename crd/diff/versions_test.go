package diff

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// ver is one version of a test CRD: its name, served and storage flags
// and its spec schema in YAML.
type ver struct {
	name            string
	served, storage bool
	spec            string
}

// versionsCRD builds a Widget CRD with the versions, conversion strategy
// (None when "") and status.storedVersions given.
func versionsCRD(t *testing.T, conversion string, stored []string, vers ...ver) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := mustCRD(t, baseCRD)
	crd.Spec.Versions = nil
	for _, v := range vers {
		var s apiextensionsv1.JSONSchemaProps
		if err := yaml.UnmarshalStrict([]byte(v.spec), &s); err != nil {
			t.Fatalf("schema of %s: %v", v.name, err)
		}
		crd.Spec.Versions = append(crd.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v.name, Served: v.served, Storage: v.storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": s}}}})
	}
	if conversion == "Webhook" {
		url := "https://conv.example.com/convert"
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
			Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url}, ConversionReviewVersions: []string{"v1"}}}
	} else if conversion != "" {
		crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.ConversionStrategyType(conversion)}
	}
	crd.Status.StoredVersions = stored
	return crd
}

const (
	colors  = `{type: object, properties: {color: {type: string, enum: [red, blue]}, size: {type: integer}}}`
	red     = `{type: object, properties: {color: {type: string, enum: [red]}, size: {type: integer}}}`
	sizeStr = `{type: object, properties: {color: {type: string, enum: [red, blue]}, size: {type: string}}}`
	noSize  = `{type: object, properties: {color: {type: string, enum: [red, blue]}}}`
	withX   = `{type: object, properties: {color: {type: string, enum: [red, blue]}, size: {type: integer}, x: {type: string}}}`
)

// TestCompareBetweenVersions has one case per comparison that was wrong
// before checks between versions existed, with the expected checks
// (check, severity, field, path and, for checks between two versions,
// version<-against) and words of the messages that matter.
func TestCompareBetweenVersions(t *testing.T) {
	tests := []struct {
		name     string
		old, new func(t *testing.T) *apiextensionsv1.CustomResourceDefinition
		want     []string
		messages []string // substrings of the messages, in check order
	}{
		{
			name: "served versions without conversion: an enum of v2 that v1's values violate",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red})
			},
			want:     []string{"version-added safe  /spec/versions/1", "enum-values-removed breaking spec.color /properties/spec/properties/color/enum v2<-v1"},
			messages: []string{"", "v1 and v2 are both served without conversion, so an object written at v1 is read and updated at v2 as it is: spec.color no longer accepts \"blue\""},
		},
		{
			name: "served versions without conversion: a type that differs, older first in Kubernetes version order",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "", nil, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "", nil, ver{"v1", true, true, colors}, ver{"v1beta1", true, false, sizeStr})
			},
			want: []string{"version-added safe  /spec/versions/1", "type-changed breaking spec.size /properties/spec/properties/size/type v1<-v1beta1"},
		},
		{
			name: "served versions that already differed in the old CRD are not reported again",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red})
			},
		},
		{
			name: "a version added with the schema of one already served brings no new difference",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red}, ver{"v3", true, false, red})
			},
			want: []string{"version-added safe  /spec/versions/2"},
		},
		{
			name: "a version served again whose schema another served version tightens",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", false, false, colors}, ver{"v2", true, true, red})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, false, colors}, ver{"v2", true, true, red})
			},
			want: []string{"version-served safe  /spec/versions/0/served", "enum-values-removed breaking spec.color /properties/spec/properties/color/enum v2<-v1"},
		},
		{
			name: "served versions with a conversion webhook are converted, not compared",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", nil, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, red})
			},
			want: []string{"version-added safe  /spec/versions/1"},
		},
		{
			name: "storage switch v2 -> v3 after a safe change to v2 is safe",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v2", true, true, noSize})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v2", true, false, colors}, ver{"v3", true, true, colors})
			},
			want: []string{"storage-version-changed safe  /spec/versions", "field-added safe spec.size /properties/spec/properties/size", "version-added safe  /spec/versions/1"},
		},
		{
			name: "storage switch against every stored version: v1 in storedVersions had a field v3 drops",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", []string{"v1", "v2"}, ver{"v1", false, false, withX}, ver{"v2", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", false, false, withX}, ver{"v2", true, false, colors}, ver{"v3", true, true, colors})
			},
			want: []string{"storage-version-changed breaking  /spec/versions", "version-added safe  /spec/versions/2",
				"field-removed breaking spec.x /properties/spec/properties/x v3<-v1"},
			messages: []string{"storage version changed from v2 to v3 with conversion None: objects written at v1 lose what v3's schema does not have", "",
				"objects stored at v1 are rewritten at v3 unconverted on their next write: spec.x was removed"},
		},
		{
			name: "conversion None -> Webhook while one version is served and stored",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", []string{"v1"}, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", nil, ver{"v1", true, true, colors})
			},
			want: []string{"conversion-changed safe  /spec/conversion/strategy"},
		},
		{
			name: "conversion None -> Webhook with two served versions",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", nil, ver{"v1", true, true, colors}, ver{"v2", true, false, colors})
			},
			want:     []string{"conversion-changed unknown  /spec/conversion/strategy"},
			messages: []string{"now go through the webhook"},
		},
		{
			name: "conversion Webhook -> None on a CRD that now serves one version (cert-manager v1.6 -> v1.7)",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", []string{"v1"}, ver{"v1alpha2", true, false, sizeStr}, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1", true, true, colors})
			},
			want: []string{"conversion-changed safe  /spec/conversion/strategy", "served-version-removed breaking  /spec/versions/0"},
		},
		{
			name: "conversion Webhook -> None while objects are still stored at a version no longer served",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "Webhook", []string{"v1alpha2", "v1"}, ver{"v1alpha2", true, false, sizeStr}, ver{"v1", true, true, colors})
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return versionsCRD(t, "None", nil, ver{"v1alpha2", false, false, sizeStr}, ver{"v1", true, true, colors})
			},
			want: []string{"conversion-changed unknown  /spec/conversion/strategy", "served-version-removed breaking  /spec/versions/0/served",
				"type-changed breaking spec.size /properties/spec/properties/size/type v1<-v1alpha2"},
			messages: []string{"whatever the webhook changed between versions is no longer done", "", "objects stored at v1alpha2 are now served at v1 unconverted"},
		},
		{
			name: "nullable added to a field with a default",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return withSchema(t, `{type: object, properties: {size: {type: integer, default: 1}}}`)
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return withSchema(t, `{type: object, properties: {size: {type: integer, default: 1, nullable: true}}}`)
			},
			want:     []string{"nullable-added breaking spec.size /properties/spec/properties/size/nullable"},
			messages: []string{"an explicit null now stays null instead of being defaulted to 1"},
		},
		{
			name: "nullable added to a field without a default",
			old: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return withSchema(t, `{type: object, properties: {size: {type: integer}}}`)
			},
			new: func(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
				return withSchema(t, `{type: object, properties: {size: {type: integer, nullable: true}}}`)
			},
			want: []string{"nullable-added safe spec.size /properties/spec/properties/size/nullable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compare(tt.old(t), tt.new(t))
			got := summary(r)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("checks:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tt.want, "\n  "))
			}
			for i, m := range tt.messages {
				if !strings.Contains(r.Checks[i].Message, m) {
					t.Errorf("check %d message %q does not say %q", i, r.Checks[i].Message, m)
				}
			}
		})
	}
}
