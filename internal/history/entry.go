package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/jsonscan"
)

// Source says how an entry came into a replica's history.
type Source string

const (
	// Delivered entries are firings this replica's actions handled
	// (delivered, or dead-lettered after their retries).
	Delivered Source = "delivered"
	// Confirmed entries are firings a standby evaluated on the changes
	// the leader's watermarks confirmed: the leader delivered them.
	Confirmed Source = "confirmed"
)

// Entry is one firing in the history. Its fields are read from Payload
// (ParsePayload), which is kept as the actions received it; Seq, Recorded
// and Source are the store's.
type Entry struct {
	// Seq is the store's sequence number, in the order entries were
	// written; with Time it makes the cursor.
	Seq int64
	// ID is the payload's id: "<uid>/<resourceVersion>/<rule>" or
	// "<uid>/deleted/<rule>". The history holds one entry per id.
	ID string
	// Time is the payload's time: when fieldwatch observed the change.
	Time time.Time
	// Recorded is when the entry was written.
	Recorded time.Time
	Rule     string
	Type     change.Type
	// Group, Version, Resource and Kind are the payload's resource.
	Group, Version, Resource, Kind string
	Namespace, Name, UID           string
	ResourceVersion                string
	// User is the authenticated user's name and Impersonated the
	// impersonated user's (actor.user, actor.impersonatedUser), "" when
	// the payload does not name them; Manager is actor.manager.
	User, Impersonated, Manager string
	// Cluster is the payload's cluster (--cluster-name), "" when it names
	// none: several clusters' instances may write into one database.
	Cluster string
	// Source says whether this replica delivered it or recorded it from
	// the leader's confirmation.
	Source Source
	// Payload is the JSON payload (docs/payload.md).
	Payload []byte
	// Omitted, when positive, is the size of a payload left out of a
	// page (Query.MaxBytes): Payload is nil, and so are the fields read
	// only from it (Version, Kind, ResourceVersion, Manager).
	Omitted int64
}

// payloadHead is what ParsePayload decodes of a payload; everything else
// (changes, crd, object, oldObject) is skipped unread.
type payloadHead struct {
	ID       string `json:"id"`
	Time     string `json:"time"`
	Rule     string `json:"rule"`
	Type     string `json:"type"`
	Resource struct {
		Group    string `json:"group"`
		Version  string `json:"version"`
		Resource string `json:"resource"`
		Kind     string `json:"kind"`
	} `json:"resource"`
	Namespace       string `json:"namespace"`
	Name            string `json:"name"`
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
	Cluster         string `json:"cluster"`
	Actor           struct {
		Manager string `json:"manager"`
		User    struct {
			Username string `json:"username"`
		} `json:"user"`
		ImpersonatedUser struct {
			Username string `json:"username"`
		} `json:"impersonatedUser"`
	} `json:"actor"`
}

// headKeys are the top-level keys of a payload that ParsePayload decodes.
var headKeys = map[string]bool{
	"id": true, "time": true, "rule": true, "type": true, "resource": true, "namespace": true,
	"name": true, "uid": true, "resourceVersion": true, "cluster": true, "actor": true,
}

// ParsePayload returns the entry of a payload: its fields read from the
// top-level keys of the JSON object, the large values (changes, crd,
// object, oldObject) skipped without being decoded. The payload is
// kept, not copied: it must not change afterwards.
func ParsePayload(payload []byte, source Source) (Entry, error) {
	var h payloadHead
	err := jsonscan.EachKey(payload, func(key string, value []byte) error {
		switch key {
		case "resource":
			return jsonscan.EachKey(value, func(key string, value []byte) error {
				switch key {
				case "group":
					return decodeString(value, &h.Resource.Group)
				case "version":
					return decodeString(value, &h.Resource.Version)
				case "resource":
					return decodeString(value, &h.Resource.Resource)
				case "kind":
					return decodeString(value, &h.Resource.Kind)
				}
				return nil
			})
		case "actor":
			return decodeActor(value, &h)
		}
		if !headKeys[key] {
			return nil
		}
		return decodeString(value, fieldOf(&h, key).(*string))
	})
	if err != nil {
		return Entry{}, fmt.Errorf("payload: %w", err)
	}
	if h.ID == "" || h.UID == "" || h.Rule == "" {
		return Entry{}, errors.New("payload: no id, uid or rule")
	}
	t, err := time.Parse(time.RFC3339Nano, h.Time)
	if err != nil {
		return Entry{}, fmt.Errorf("payload: time: %w", err)
	}
	if t.Before(MinTime) || !t.Before(MaxTime) {
		return Entry{}, fmt.Errorf("payload: time %s: outside the history's range (%s to %s)", h.Time, MinTime.Format(time.RFC3339), MaxTime.Format(time.RFC3339))
	}
	typ := change.Type(h.Type)
	switch typ {
	case change.Created, change.Updated, change.Deleted:
	default:
		return Entry{}, fmt.Errorf("payload: type %q", h.Type)
	}
	return Entry{
		ID: h.ID, Time: t.UTC(), Rule: h.Rule, Type: typ,
		Group: h.Resource.Group, Version: h.Resource.Version, Resource: h.Resource.Resource, Kind: h.Resource.Kind,
		Namespace: h.Namespace, Name: h.Name, UID: h.UID, ResourceVersion: h.ResourceVersion,
		User: h.Actor.User.Username, Impersonated: h.Actor.ImpersonatedUser.Username, Manager: h.Actor.Manager,
		Cluster: h.Cluster, Source: source, Payload: payload,
	}, nil
}

// decodeActor decodes of the payload's actor its manager and the
// usernames of its user and impersonatedUser, walking its keys as
// ParsePayload walks the payload's (encoding/json's reflection cost more
// than the rest of an entry's parse); null stands for absent.
func decodeActor(value []byte, h *payloadHead) error {
	username := func(value []byte, s *string) error {
		return eachKeyOrNull(value, func(key string, value []byte) error {
			if key == "username" {
				return decodeString(value, s)
			}
			return nil
		})
	}
	return eachKeyOrNull(value, func(key string, value []byte) error {
		switch key {
		case "manager":
			return decodeString(value, &h.Actor.Manager)
		case "user":
			return username(value, &h.Actor.User.Username)
		case "impersonatedUser":
			return username(value, &h.Actor.ImpersonatedUser.Username)
		}
		return nil
	})
}

// eachKeyOrNull is jsonscan.EachKey, with JSON null an object without
// keys.
func eachKeyOrNull(value []byte, fn func(key string, value []byte) error) error {
	if string(bytes.TrimSpace(value)) == "null" {
		return nil
	}
	return jsonscan.EachKey(value, fn)
}

// decodeString decodes the JSON string value into s: without escapes at
// once, otherwise through encoding/json.
func decodeString(value []byte, s *string) error {
	if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
		raw := value[1 : len(value)-1]
		plain := true
		for _, c := range raw {
			if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
				plain = false
				break
			}
		}
		if plain {
			*s = string(raw)
			return nil
		}
	}
	return json.Unmarshal(value, s)
}

// fieldOf returns the field of h that a top-level key decodes into.
func fieldOf(h *payloadHead, key string) any {
	switch key {
	case "id":
		return &h.ID
	case "time":
		return &h.Time
	case "rule":
		return &h.Rule
	case "type":
		return &h.Type
	case "resource":
		return &h.Resource
	case "namespace":
		return &h.Namespace
	case "name":
		return &h.Name
	case "uid":
		return &h.UID
	case "resourceVersion":
		return &h.ResourceVersion
	case "cluster":
		return &h.Cluster
	default: // "actor"
		return &h.Actor
	}
}

// Who names who made the change: the impersonated user, else the
// authenticated one, else the field manager; "" when the payload tells
// none of them.
func (e *Entry) Who() string {
	switch {
	case e.Impersonated != "":
		return e.Impersonated
	case e.User != "":
		return e.User
	}
	return e.Manager
}
