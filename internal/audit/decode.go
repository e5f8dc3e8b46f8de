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

	"github.com/fieldwatch/fieldwatch/change"
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
	SourceIPs                wireStrings              `json:"sourceIPs"`
	UserAgent                string                   `json:"userAgent"`
	ObjectRef                *auditv1.ObjectReference `json:"objectRef"`
	ResponseStatus           *wireStatus              `json:"responseStatus"`
	RequestObject            *wireMeta                `json:"requestObject"`
	ResponseObject           *wireMeta                `json:"responseObject"`
	RequestReceivedTimestamp metav1.MicroTime         `json:"requestReceivedTimestamp"`
	StageTimestamp           metav1.MicroTime         `json:"stageTimestamp"`
}

type wireUser struct {
	Username string      `json:"username"`
	UID      string      `json:"uid"`
	Groups   wireStrings `json:"groups"`
}

func (u *wireUser) info() change.UserInfo {
	return change.UserInfo{Username: u.Username, UID: u.UID, Groups: u.Groups}
}

// wireStrings is a list of strings (groups, source IPs) that is refused
// unread when its JSON is longer than maxListJSON: an empty string takes
// three bytes of JSON and, decoded, a string header of 16, so a list
// costs several times its JSON in memory.
type wireStrings []string

// maxListJSON is the most JSON a list of strings may have: six times
// MaxEventBytes, so that no list an event may keep is refused (a kept
// string costs 16 bytes besides its own, an escape takes at most six
// bytes of JSON per byte), and decoding a list allocates at most about
// twelve times MaxEventBytes.
const maxListJSON = 6 * MaxEventBytes

// UnmarshalJSON decodes the list unless its JSON is too long.
func (s *wireStrings) UnmarshalJSON(data []byte) error {
	if len(data) > maxListJSON {
		return ErrEventTooLarge
	}
	return json.Unmarshal(data, (*[]string)(s))
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

// The bounds of one event.
const (
	// MaxEventBytes bounds what attribution keeps of an event: its
	// strings (auditID, user, groups, impersonated user, user agent,
	// source IPs, object reference, uids, resourceVersions, generateName)
	// and lists, at 16 bytes a string besides its bytes (Record.keptBytes).
	// Extra, annotations and bodies are never kept.
	MaxEventBytes = 64 << 10
	// MaxEventJSONBytes bounds the JSON of one item of an EventList (a
	// RequestResponse event of an object at etcd's 1.5 MiB limit, in the
	// request and the response, is about 3 MiB): the decoder holds one item
	// at a time.
	MaxEventJSONBytes = 4 << 20
)

// ErrEventTooLarge is the error of an event of which attribution would
// keep more than MaxEventBytes.
var ErrEventTooLarge = fmt.Errorf("the audit event keeps more than %d bytes (user, groups, impersonated user, user agent, source IPs, names)", MaxEventBytes)

// ErrEventJSONTooLarge is the error of an EventList item of more than
// MaxEventJSONBytes of JSON.
var ErrEventJSONTooLarge = fmt.Errorf("an audit event larger than %d bytes of JSON", MaxEventJSONBytes)

// DecodeEvent decodes one audit.k8s.io/v1 Event, such as a line of the
// apiserver's JSON audit log. keep is false, at no further cost, for the
// events attribution ignores: stages other than ResponseComplete and Panic,
// reads, non-resource requests and dry runs. A Panic is kept as a failure
// (Code 500). An event that would keep more than MaxEventBytes fails with
// ErrEventTooLarge.
func DecodeEvent(data []byte) (rec Record, keep bool, err error) {
	var w wireEvent
	if err := json.Unmarshal(data, &w); err != nil {
		return Record{}, false, fmt.Errorf("decode audit event: %w", err)
	}
	rec, keep, err = w.record()
	if err != nil {
		return Record{}, false, fmt.Errorf("decode audit event: %w", err)
	}
	return rec, keep, nil
}

// ListCounts says what DecodeEventList read.
type ListCounts struct {
	// Items is how many items of the list were decoded.
	Items int
	// TooLarge is how many of them were skipped because attribution
	// would keep more than MaxEventBytes of them (ErrEventTooLarge).
	TooLarge int
}

// DecodeEventList decodes an audit.k8s.io/v1 EventList from r, one item at
// a time (memory grows with the largest item, at most MaxEventJSONBytes,
// not with the list), and calls fn with every event DecodeEvent would
// keep; an error of fn stops the decoding and is returned. An item that
// would keep more than MaxEventBytes is skipped and counted, and the list
// goes on. A malformed item, or one of more than MaxEventJSONBytes
// (ErrEventJSONTooLarge), stops the decoding with an error that names its
// index; fn has then been called for the items before it.
func DecodeEventList(r io.Reader, fn func(Record) error) (ListCounts, error) {
	lim := &itemLimiter{r: r, until: MaxEventJSONBytes}
	dec := json.NewDecoder(lim)
	var counts ListCounts
	if err := expectDelim(dec, '{'); err != nil {
		return counts, fmt.Errorf("decode audit event list: %w", err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return counts, fmt.Errorf("decode audit event list: %w", err)
		}
		key, _ := tok.(string)
		lim.from(dec.InputOffset())
		switch key {
		case "items":
			if err = decodeItems(dec, lim, fn, &counts); err != nil {
				return counts, err
			}
		case "kind", "apiVersion":
			var s string
			if err := dec.Decode(&s); err != nil {
				return counts, fmt.Errorf("decode audit event list: %s: %w", key, err)
			}
			if key == "kind" && s != "EventList" {
				return counts, fmt.Errorf("decode audit event list: kind %q, want EventList", s)
			}
			if key == "apiVersion" && s != APIVersion {
				return counts, fmt.Errorf("decode audit event list: apiVersion %q, want %s", s, APIVersion)
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return counts, fmt.Errorf("decode audit event list: %s: %w", key, err)
			}
		}
		lim.from(dec.InputOffset())
	}
	if err := expectDelim(dec, '}'); err != nil {
		return counts, fmt.Errorf("decode audit event list: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return counts, errors.New("decode audit event list: data after the list")
	}
	return counts, nil
}

func decodeItems(dec *json.Decoder, lim *itemLimiter, fn func(Record) error, counts *ListCounts) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("decode audit event list: items: %w", err)
	}
	if tok == nil { // "items": null
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("decode audit event list: items: %v, want an array", tok)
	}
	var w wireEvent
	for lim.from(dec.InputOffset()); dec.More(); lim.from(dec.InputOffset()) {
		w = wireEvent{}
		// An error of an item's own (not of the input) leaves the decoder
		// after the item: a too large one is skipped.
		err := dec.Decode(&w)
		var rec Record
		keep := false
		if err == nil {
			rec, keep, err = w.record()
		}
		if errors.Is(err, ErrEventTooLarge) {
			counts.Items++
			counts.TooLarge++
			continue
		}
		if err != nil {
			return fmt.Errorf("decode audit event list: items[%d]: %w", counts.Items, err)
		}
		counts.Items++
		if keep {
			if err := fn(rec); err != nil {
				return err
			}
		}
	}
	if err := expectDelim(dec, ']'); err != nil {
		return fmt.Errorf("decode audit event list: items: %w", err)
	}
	return nil
}

// itemLimiter lets a json.Decoder read at most MaxEventJSONBytes (and a
// little for the delimiters) past the start of what it decodes next, so
// that its buffer never holds more than one item of that size.
type itemLimiter struct {
	r     io.Reader
	read  int64 // bytes handed to the decoder
	until int64 // how far it may read
}

// from lets the decoder read MaxEventJSONBytes past offset.
func (l *itemLimiter) from(offset int64) { l.until = offset + MaxEventJSONBytes + 64 }

func (l *itemLimiter) Read(p []byte) (int, error) {
	room := l.until - l.read
	if room <= 0 {
		return 0, ErrEventJSONTooLarge
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.read += int64(n)
	return n, err
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
		User:        w.User.info(),
		UserAgent:   w.UserAgent,
		SourceIPs:   w.SourceIPs,
		RefUID:      string(ref.UID),
	}
	if rec.Verb == "update" {
		rec.RefResourceVersion = ref.ResourceVersion
	}
	if w.ImpersonatedUser != nil {
		u := w.ImpersonatedUser.info()
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
	if rec.keptBytes() > MaxEventBytes {
		return Record{}, false, ErrEventTooLarge
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
