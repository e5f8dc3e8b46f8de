package audit

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// AdmissionReviewVersion is the only AdmissionReview version the
// admission endpoint takes (the configuration it generates asks for it).
const AdmissionReviewVersion = "admission.k8s.io/v1"

// The errors of a review the endpoint refuses (400).
var (
	errReviewVersion = errors.New("not an AdmissionReview of " + AdmissionReviewVersion + " (set admissionReviewVersions: [v1])")
	errReviewNoUID   = errors.New("an AdmissionReview without request.uid")
)

// AllowedUserExtra are the keys of a user's extra attributes that a
// record keeps (change.UserInfo.Extra): those kube-apiserver sets to
// name the credential a request was made with (the ID of a service
// account token or a certificate's fingerprint, never the secret itself)
// and the pod or node a service account token was bound to. Any other
// key (a provider's, an OIDC claim, one an impersonator set) may carry
// anything, a token included, and is dropped.
var AllowedUserExtra = map[string]bool{
	"authentication.kubernetes.io/credential-id": true,
	"authentication.kubernetes.io/pod-name":      true,
	"authentication.kubernetes.io/pod-uid":       true,
	"authentication.kubernetes.io/node-name":     true,
	"authentication.kubernetes.io/node-uid":      true,
}

// wholeSubresources are the subresources whose admission object is the
// resource's own object, as it is stored: its content hash can be
// compared with the watched object's. A scale subresource's is a Scale.
var wholeSubresources = map[string]bool{"": true, "status": true, "ephemeralcontainers": true, "resize": true}

// review is what the endpoint reads of an AdmissionReview.
type review struct {
	uid                                   string
	group, version, resource, subResource string
	name, namespace, operation            string
	dryRun                                bool
	user                                  change.UserInfo
	object, oldObject                     []byte // raw JSON; nil or null when absent
}

// decodeReview reads an AdmissionReview of admission.k8s.io/v1 without
// decoding its objects: they are only scanned for their metadata and
// hashed (recordOf). Its errors say what is wrong.
func decodeReview(body []byte) (review, error) {
	var rv review
	var apiVersion, kind string
	var request []byte
	err := jsonscan.EachKey(body, func(key string, value []byte) (err error) {
		switch key {
		case "apiVersion":
			apiVersion, err = jsonString(value)
		case "kind":
			kind, err = jsonString(value)
		case "request":
			request = value
		}
		return err
	})
	switch {
	case err != nil:
		return rv, fmt.Errorf("malformed AdmissionReview: %w", err)
	case apiVersion != AdmissionReviewVersion || kind != "AdmissionReview":
		return rv, fmt.Errorf("%w: apiVersion %q, kind %q", errReviewVersion, truncate(apiVersion, 64), truncate(kind, 64))
	case request == nil || isNull(request):
		return rv, errors.New("an AdmissionReview without a request")
	}
	err = jsonscan.EachKey(request, func(key string, value []byte) (err error) {
		switch key {
		case "uid":
			rv.uid, err = jsonString(value)
		case "resource":
			err = eachString(value, func(k, v string) {
				switch k {
				case "group":
					rv.group = v
				case "version":
					rv.version = v
				case "resource":
					rv.resource = v
				}
			})
		case "subResource":
			rv.subResource, err = jsonString(value)
		case "name":
			rv.name, err = jsonString(value)
		case "namespace":
			rv.namespace, err = jsonString(value)
		case "operation":
			rv.operation, err = jsonString(value)
		case "userInfo":
			rv.user, err = decodeUserInfo(value)
		case "object":
			rv.object = value
		case "oldObject":
			rv.oldObject = value
		case "dryRun":
			rv.dryRun = string(value) == "true"
		}
		return err
	})
	if err != nil {
		return rv, fmt.Errorf("malformed AdmissionReview request: %w", err)
	}
	if rv.uid == "" {
		return rv, errReviewNoUID
	}
	return rv, nil
}

// decodeUserInfo reads request.userInfo, keeping of extra the
// AllowedUserExtra keys only.
func decodeUserInfo(value []byte) (change.UserInfo, error) {
	var u change.UserInfo
	err := jsonscan.EachKey(value, func(key string, v []byte) (err error) {
		switch key {
		case "username":
			u.Username, err = jsonString(v)
		case "uid":
			u.UID, err = jsonString(v)
		case "groups":
			u.Groups, err = jsonStrings(v)
		case "extra":
			if isNull(v) {
				return nil
			}
			err = jsonscan.EachKey(v, func(k string, vs []byte) error {
				if !AllowedUserExtra[k] {
					return nil
				}
				list, err := jsonStrings(vs)
				if err == nil && len(list) > 0 {
					if u.Extra == nil {
						u.Extra = map[string][]string{}
					}
					u.Extra[k] = list
				}
				return err
			})
		}
		return err
	})
	return u, err
}

// objectMeta is what a record needs of an object's metadata.
type objectMeta struct {
	uid, name, namespace, resourceVersion string
}

// metaOf reads metadata.uid, name, namespace and resourceVersion of the
// object obj (JSON), scanning past the rest.
func metaOf(obj []byte) (objectMeta, error) {
	var m objectMeta
	err := jsonscan.EachKey(obj, func(key string, value []byte) error {
		if key != "metadata" {
			return nil
		}
		return eachString(value, func(k, v string) {
			switch k {
			case "uid":
				m.uid = v
			case "name":
				m.name = v
			case "namespace":
				m.namespace = v
			case "resourceVersion":
				m.resourceVersion = v
			}
		})
	})
	return m, err
}

// Why a review is kept or not, as fieldwatch_admission_reviews_total's
// result labels it.
const (
	reviewKept     = "kept"
	reviewDryRun   = "dry_run"
	reviewFiltered = "filtered"
	reviewNotWrite = "not_a_write" // CONNECT, a create of a subresource
	reviewDropped  = "dropped"     // the queue to the index was full
	reviewTooLarge = "too_large"   // its user, groups and names keep more than MaxEventBytes
	reviewRefused  = "refused"     // the Guard refused the write
)

// recordOf turns a review into the record attribution keeps, or says why
// it keeps none (a reviewResult). keep, when set, says which resources
// are kept. now is when the review arrived.
func recordOf(rv *review, keep func(group, resource string) bool, now time.Time) (Record, string, error) {
	if rv.dryRun {
		return Record{}, reviewDryRun, nil
	}
	var verb string
	switch rv.operation {
	case "CREATE":
		if rv.subResource != "" {
			return Record{}, reviewNotWrite, nil // pods/binding, pods/eviction, a token request: no object of its own
		}
		verb = "create"
	case "UPDATE":
		// A patch too: the apiserver sends a patch's options to admission
		// as UpdateOptions, so admission cannot tell it from an update.
		verb = "update"
	case "DELETE":
		verb = "delete"
	default:
		return Record{}, reviewNotWrite, nil
	}
	if keep != nil && !keep(rv.group, rv.resource) {
		return Record{}, reviewFiltered, nil
	}
	rec := Record{
		Admission: true, RequestUID: rv.uid, Level: "Admission", Verb: verb, Code: 200,
		Group: rv.group, Version: rv.version, Resource: rv.resource, Subresource: rv.subResource,
		Namespace: rv.namespace, Name: rv.name,
		Received: now, Completed: now,
		User: rv.user,
	}
	stored := rv.object // what the write stores
	if verb == "delete" {
		stored = nil
	}
	if !isNull(stored) {
		m, err := metaOf(stored)
		if err != nil {
			return Record{}, "", fmt.Errorf("request.object: %w", err)
		}
		rec.ObjectUID, rec.Name = m.uid, m.name // a generated name, a uid made before admission
		if m.namespace != "" {
			rec.Namespace = m.namespace
		}
		if wholeSubresources[rv.subResource] {
			if rec.ContentHash, err = jsonscan.ObjectHash(stored); err != nil {
				return Record{}, "", fmt.Errorf("request.object: %w", err)
			}
		}
	}
	if !isNull(rv.oldObject) {
		m, err := metaOf(rv.oldObject)
		if err != nil {
			return Record{}, "", fmt.Errorf("request.oldObject: %w", err)
		}
		rec.OldResourceVersion = m.resourceVersion
		if rec.ObjectUID == "" {
			rec.ObjectUID = m.uid
		}
		if rec.Name == "" {
			rec.Name = m.name
		}
	}
	if rec.ObjectUID == "" || rec.Name == "" || verb != "create" && rec.OldResourceVersion == "" {
		return Record{}, "", fmt.Errorf("a %s review whose object names no uid, name or (oldObject) resourceVersion", rv.operation)
	}
	if rec.keptBytes() > MaxEventBytes {
		return Record{}, reviewTooLarge, nil
	}
	return rec, reviewKept, nil
}

// jsonString returns the JSON string value ("" for null).
func jsonString(value []byte) (string, error) {
	if isNull(value) {
		return "", nil
	}
	if len(value) < 2 || value[0] != '"' {
		return "", errors.New("want a string")
	}
	return jsonscan.Key(value)
}

// jsonStrings returns the JSON list of strings value (nil for null).
func jsonStrings(value []byte) ([]string, error) {
	if isNull(value) {
		return nil, nil
	}
	v, err := jsonscan.Decode(value)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("want a list of strings")
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, errors.New("want a list of strings")
		}
		out = append(out, s)
	}
	return out, nil
}

// eachString calls fn with each key of the JSON object value whose value
// is a string (null is an empty object).
func eachString(value []byte, fn func(key, v string)) error {
	if isNull(value) {
		return nil
	}
	return jsonscan.EachKey(value, func(key string, v []byte) error {
		if len(v) > 0 && v[0] == '"' {
			s, err := jsonscan.Key(v)
			if err != nil {
				return err
			}
			fn(key, s)
		}
		return nil
	})
}

// isNull reports whether value is absent or JSON null.
func isNull(value []byte) bool {
	v := bytes.TrimSpace(value)
	return len(v) == 0 || string(v) == "null"
}
