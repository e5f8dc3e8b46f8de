package action

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fieldwatch/fieldwatch/payload"
	"github.com/fieldwatch/fieldwatch/rules"
)

// Limits of the events.k8s.io/v1 API's validation.
const (
	maxNoteBytes  = 1024
	maxFieldBytes = 128 // action, reason, reportingInstance
)

// eventAction records an events.k8s.io/v1 Event regarding the object.
type eventAction struct {
	rule       string
	index      int
	spec       *rules.EventAction
	typ        string
	kube       kubernetes.Interface
	limiter    *rate.Limiter // the rule's, shared by its event actions
	controller string
	instance   string
}

var _ handler = &eventAction{}

func newEvent(rule string, index int, spec *rules.EventAction, opts Options, limiter *rate.Limiter) *eventAction {
	typ := spec.Type
	if typ == "" {
		typ = corev1.EventTypeNormal
	}
	return &eventAction{
		rule:       rule,
		index:      index,
		spec:       spec,
		typ:        typ,
		kube:       opts.Kube,
		limiter:    limiter,
		controller: opts.ReportingController,
		instance:   truncate(opts.ReportingInstance, maxFieldBytes, ""),
	}
}

func (e *eventAction) attempt(ctx context.Context, it *item) error {
	if e.kube == nil {
		return permanent(errors.New("event: no Kubernetes client configured"))
	}
	o := it.f.Object
	if o.Name == "" {
		return permanent(errors.New("event: the firing names no object"))
	}
	note, err := e.note(it.f.Payload)
	if err != nil {
		return permanent(fmt.Errorf("event note: %w", err))
	}
	// Waiting here holds the worker, so the queue fills and Deliver slows
	// the watcher down: a noisy rule is throttled, not dropped.
	if err := e.limiter.Wait(ctx); err != nil {
		return err
	}
	ns := o.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // where Events of cluster-scoped objects go
	}
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// Derived from the firing, so a retry after a lost response
			// meets AlreadyExists instead of recording a second Event.
			Name:      eventName(o.Name, it.f.ID, e.index),
			Namespace: ns,
		},
		EventTime:           metav1.NewMicroTime(time.Now()),
		ReportingController: e.controller,
		ReportingInstance:   e.instance,
		Action:              truncate(e.rule, maxFieldBytes, ""),
		Reason:              truncate(e.spec.Reason, maxFieldBytes, ""),
		Type:                e.typ,
		Note:                note,
		Regarding: corev1.ObjectReference{
			APIVersion:      apiVersion(o),
			Kind:            o.Kind,
			Namespace:       o.Namespace,
			Name:            o.Name,
			UID:             types.UID(o.UID),
			ResourceVersion: o.ResourceVersion,
		},
	}
	_, err = e.kube.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	if err != nil {
		return classifyKube(fmt.Errorf("create event: %w", err))
	}
	return nil
}

// note renders the Event's note: the rule's template, or a summary of the
// change; at most 1 KiB either way.
func (e *eventAction) note(payload []byte) (string, error) {
	if e.spec.Note != nil {
		b, err := e.spec.Note.Render(payload)
		if err != nil {
			return "", err
		}
		return truncate(string(b), maxNoteBytes, "..."), nil
	}
	return truncate(summary(payload), maxNoteBytes, "..."), nil
}

// summary describes a payload in one line:
// "<rule>: <type> <path>: <old> -> <new>, ..." for an update, and
// "<rule>: <type> <kind> <namespace>/<name>" for a change without paths.
// The payload is rules.Eval's, so it is decoded without payload.Validate:
// a note describes what it can.
func summary(data []byte) string {
	var p payload.Payload
	if err := json.Unmarshal(data, &p); err != nil {
		return "fieldwatch: unreadable payload"
	}
	var b strings.Builder
	b.WriteString(p.Rule + ": " + string(p.Type))
	if len(p.Changes) == 0 {
		name := p.Name
		if p.Namespace != "" {
			name = p.Namespace + "/" + p.Name
		}
		b.WriteString(" " + strings.TrimSpace(p.Resource.Kind+" "+name))
		return b.String()
	}
	for i, c := range p.Changes {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s: %s -> %s", c.Path, noteValue(c.OldValue), noteValue(c.Value))
		if b.Len() > maxNoteBytes {
			break
		}
	}
	return b.String()
}

func noteValue(v json.RawMessage) string {
	if len(v) == 0 {
		return "<none>"
	}
	return truncate(string(v), 200, "...")
}

// truncate cuts s to at most n bytes on a rune boundary, ending it with
// ellipsis when it was cut.
func truncate(s string, n int, ellipsis string) string {
	if len(s) <= n {
		return s
	}
	cut := n - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// eventName derives the Event's name from the object's name and the
// firing: a DNS subdomain, unique per firing and action.
func eventName(object, id string, index int) string {
	sum := sha256.Sum256([]byte(id + "\x00" + strconv.Itoa(index)))
	return dnsSafe(object, 200) + "." + hex.EncodeToString(sum[:8])
}

// dnsSafe maps name to a DNS subdomain of at most n bytes: lowercase
// letters, digits and '-' in labels that start and end with a letter or a
// digit, joined by dots.
func dnsSafe(name string, n int) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !dnsChar(c) {
			b[i] = '-'
		}
	}
	if len(b) > n {
		b = b[:n]
	}
	var labels []string
	for l := range strings.SplitSeq(string(b), ".") {
		if l = strings.Trim(l, "-"); l != "" {
			labels = append(labels, l)
		}
	}
	if len(labels) == 0 {
		return "object"
	}
	return strings.Join(labels, ".")
}

func dnsChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
}

func apiVersion(o rules.ObjectRef) string {
	if o.Group == "" {
		return o.Version
	}
	return o.Group + "/" + o.Version
}
