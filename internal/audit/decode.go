package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// APIVersion is the only audit event version the decoder reads: what the
// apiserver writes by default (--audit-log-version, --audit-webhook-version).
var APIVersion = auditv1.SchemeGroupVersion.String()

// wireEvent is the part of an audit.k8s.io/v1 Event that attribution reads,
// with the field names and types of auditv1.Event (TestWireMatchesAPI
// checks them against it). The bodies decode into wireMeta, which keeps only
// metadata; user extra, annotations and requestURI beyond its query are
// skipped.
type wireEvent struct {
	Kind                     string                   `json:"kind"`
	APIVersion               string                   `json:"apiVersion"`
	Level                    auditv1.Level            `json:"level"`
	AuditID                  types.UID                `json:"auditID"`
	Stage                    auditv1.Stage            `json:"stage"`
	RequestURI               string                   `json:"requestURI"`
	Verb                     string                   `json:"verb"`
	User                     wireUser                 `json:"user"`
	ImpersonatedUser         *wireUser                `json:"impersonatedUser"`
	SourceIPs                []string                 `json:"sourceIPs"`
	UserAgent                string                   `json:"userAgent"`
	ObjectRef                *auditv1.ObjectReference `json:"objectRef"`
	ResponseStatus           *wireStatus              `json:"responseStatus"`
	RequestObject            *wireMeta                `json:"requestObject"`
	ResponseObject           *wireMeta                `json:"responseObject"`
	RequestReceivedTimestamp metav1.MicroTime         `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime         `json:"stageTimestamp"`
}

type wireUser struct {
	Username string   `json:"username"`
	UID      string   `json:"uid"`
	Groups   []string `json:"groups"`
}

type wireStatus struct {
	Code    int32 `json:"code"`
	Details *struct {
		UID string `json:"uid"`
	} `json:"details"`
}

// wireMeta is a request or response body of which only metadata is read
// (of a Status, the uid in its details: the object a delete removed). A
// body that is not a JSON object (a JSON patch is an array) leaves it
// empty instead of failing the event.
type wireMeta struct {
	Name            string
	GenerateName    string
	UID             string
	ResourceVersion string
}

// UnmarshalJSON reads metadata from an object and ignores anything else.
func (m *wireMeta) UnmarshalJSON(data []byte) error {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 || data[0] != '{' {
		return nil
	}
	var body struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name            string `json:"name"`
			GenerateName    string `json:"generateName"`
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Details struct {
			UID string `json:"uid"`
		} `json:"details"`
	}
	if err := json.Unmarshal(data, &body); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil // a body whose metadata is not an object carries no identity
		}
		return err
	}
	*m = wireMeta(body.Metadata)
	if body.Kind == "Status" {
		*m = wireMeta{UID: body.Details.UID}
	}
	return nil
}

// DecodeEvent decodes one audit.k8s.io/v1 Event, such as a line of the
// apiserver's JSON audit log. keep is false, at no further cost, for the
// events attribution ignores: stages other than ResponseComplete and Panic,
// reads, non-resource requests and dry runs. A Panic is kept as a failure
// (Code 500).
func DecodeEvent(data []byte) (rec Record, keep bool, err error) {
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return Record{}, false, fmt.Errorf("decode audit event: %w", err)
	}
	return w.record()
}

// DecodeEventList decodes an audit.k8s.io/v1 EventList from r, one item at
// a time (memory grows with the largest event, not with the list), and
// calls fn with every event DecodeEvent would keep. It returns the number
// of items decoded. A malformed item stops the decoding with an error that
// names its index; fn has then been called for the items before it.
func DecodeEventList(r io.Reader, fn func(Record)) (int, error) {
	dec := json.NewDecoder(r)
	if err := expectDelim(dec, '{'); err != nil {
		return 0, fmt.Errorf("decode audit event list: %w", err)
	}
	n := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return n, fmt.Errorf("decode audit event list: %w", err)
		}
		key, _ := tok.(string)
		switch key {
		case "items":
			if n, err = decodeItems(dec, fn); err != nil {
				return n, err
			}
		case "kind", "apiVersion":
			var s string
			if err := dec.Decode(&s); err != nil {
				return n, fmt.Errorf("decode audit event list: %s: %w", key, err)
			}
			if key == "kind" && s != "EventList" {
				return n, fmt.Errorf("decode audit event list: kind %q, want EventList", s)
			}
			if key == "apiVersion" && s != APIVersion {
				return n, fmt.Errorf("decode audit event list: apiVersion %q, want %s", s, APIVersion)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return n, fmt.Errorf("decode audit event list: %s: %w", key, err)
			}
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return n, fmt.Errorf("decode audit event list: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return n, errors.New("decode audit event list: data after the list")
	}
	return n, nil
}

func decodeItems(dec *json.Decoder, fn func(Record)) (int, error) {
	tok, err := dec.Token()
	if err != nil {
		return 0, fmt.Errorf("decode audit event list: items: %w", err)
	}
	if tok == nil { // "items": null
		return 0, nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return 0, fmt.Errorf("decode audit event list: items: %v, want an array", tok)
	}
	n := 0
	var w wireEvent
	for dec.More() {
		w = wireEvent{}
		if err := dec.Decode(&w); err != nil {
			return n, fmt.Errorf("decode audit event list: items[%d]: %w", n, err)
		}
		rec, keep, err := w.record()
		if err != nil {
			return n, fmt.Errorf("decode audit event list: items[%d]: %w", n, err)
		}
		n++
		if keep {
			fn(rec)
		}
	}
	if err := expectDelim(dec, ']'); err != nil {
		return n, fmt.Errorf("decode audit event list: items: %w", err)
	}
	return n, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("unexpected end of input, want %q", want)
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("unexpected %v, want %q", tok, want)
	}
	return nil
}

// record converts a decoded event into a Record; keep is false for the
// events attribution ignores.
func (w *wireEvent) record() (Record, bool, error) {
	if w.Kind != "" && w.Kind != "Event" {
		return Record{}, false, fmt.Errorf("kind %q, want Event", w.Kind)
	}
	if w.APIVersion != "" && w.APIVersion != APIVersion {
		return Record{}, false, fmt.Errorf("apiVersion %q, want %s", w.APIVersion, APIVersion)
	}
	var code int32
	switch w.Stage {
	case auditv1.StageResponseComplete:
		if w.ResponseStatus != nil {
			code = w.ResponseStatus.Code
		}
	case auditv1.StagePanic:
		code = 500
	default:
		return Record{}, false, nil
	}
	if w.ObjectRef == nil || !IsWriteVerb(w.Verb) || isDryRun(w.RequestURI) {
		return Record{}, false, nil
	}
	ref := w.ObjectRef
	rec := Record{
		AuditID:     string(w.AuditID),
		Level:       string(w.Level),
		Verb:        w.Verb,
		Group:       ref.APIGroup,
		Version:     ref.APIVersion,
		Resource:    ref.Resource,
		Subresource: ref.Subresource,
		Namespace:   ref.Namespace,
		Name:        ref.Name,
		Code:        code,
		Received:    w.RequestReceivedTimestamp.Time,
		Completed:   w.StageTimestamp.Time,
		User:        UserInfo(w.User),
		UserAgent:   w.UserAgent,
		SourceIPs:   w.SourceIPs,
		RefUID:      string(ref.UID),
	}
	if rec.Verb == "update" {
		rec.RefResourceVersion = ref.ResourceVersion
	}
	if w.ImpersonatedUser != nil {
		u := UserInfo(*w.ImpersonatedUser)
		rec.ImpersonatedUser = &u
	}
	if resp := w.ResponseObject; resp != nil && resp.UID != "" {
		// An object (also the response of a /status or /scale write), or
		// the Status of a delete that removed the object at once (its uid,
		// no resourceVersion). A deletecollection's list has no uid.
		rec.ResponseUID = resp.UID
		rec.ResponseResourceVersion = resp.ResourceVersion
		if rec.Name == "" && rec.Verb == "create" && rec.Subresource == "" {
			rec.Name = resp.Name // a create with generateName
		}
	}
	if st := w.ResponseStatus; rec.ResponseUID == "" && rec.Verb == "delete" && st != nil && st.Details != nil {
		// Even at Metadata level, the response status of a delete that
		// removed the object at once names its uid.
		rec.ResponseUID = st.Details.UID
	}
	if req := w.RequestObject; req != nil && rec.Verb == "create" {
		rec.GenerateName = req.GenerateName
	}
	return rec, true, nil
}

// isDryRun reports whether the request URI asks for a dry run: such a
// write is audited like any other but changes nothing.
func isDryRun(requestURI string) bool {
	if !strings.Contains(requestURI, "dryRun") {
		return false
	}
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return false
	}
	return len(u.Query()["dryRun"]) > 0
}
