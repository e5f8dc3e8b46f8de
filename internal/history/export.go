package history

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
)

// ExportFormat names the export's format in its header line.
const ExportFormat = "fieldwatch-trail-v1"

// exportTime is how an export writes times: UTC to the microsecond, what
// the stores keep and the hashes cover.
const exportTime = "2006-01-02T15:04:05.000000Z"

// ExportHeader is an export's first line.
type ExportHeader struct {
	Kind     string    `json:"kind"` // "header"
	Format   string    `json:"format"`
	Exported time.Time `json:"exported"`
}

// exportLine is an export's line for a link (docs/trail.md).
type exportLine struct {
	Kind  LinkKind `json:"kind"`
	Chain string   `json:"chain"`
	Pos   int64    `json:"pos"`
	Ref   string   `json:"ref,omitempty"`
	Time  string   `json:"time,omitempty"`
	At    string   `json:"at"`
	// EntryHash is an entry link's body; Body the JSON body of the
	// others.
	EntryHash string          `json:"entryHash,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	Prev      string          `json:"prev"`
	Hash      string          `json:"hash"`
	Sig       []byte          `json:"sig,omitempty"`
	Key       int64           `json:"key,omitempty"`
	// Entry is an entry link's row, absent when there is none.
	Entry *exportEntry `json:"entry,omitempty"`
}

// exportEntry is an entry's row.
type exportEntry struct {
	Seq          int64  `json:"seq"`
	ID           string `json:"id"`
	Time         string `json:"time"`
	Recorded     string `json:"recorded"`
	Rule         string `json:"rule"`
	Type         string `json:"type"`
	Group        string `json:"group"`
	Resource     string `json:"resource"`
	Namespace    string `json:"namespace"`
	Name         string `json:"name"`
	UID          string `json:"uid"`
	User         string `json:"user"`
	Impersonated string `json:"impersonated"`
	Source       string `json:"source"`
	// Payload is the payload as stored when it is compact JSON on one
	// line; PayloadBase64 otherwise.
	Payload       json.RawMessage `json:"payload,omitempty"`
	PayloadBase64 []byte          `json:"payloadBase64,omitempty"`
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(exportTime)
}

// Export writes the trail's links, with their entries, as JSON Lines
// after a header line; now is the header's time, which Verify takes as
// when the trail was read.
func Export(ctx context.Context, t Trail, w io.Writer, now time.Time) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ExportHeader{Kind: "header", Format: ExportFormat, Exported: now.UTC()}); err != nil {
		return err
	}
	var compact bytes.Buffer
	err := t.Links(ctx, func(l *Link, e *Entry) error {
		line := exportLine{Kind: l.Kind, Chain: l.Chain, Pos: l.Pos, Ref: l.Ref, Time: formatTime(l.Time), At: formatTime(l.At),
			Prev: hex.EncodeToString(l.Prev), Hash: hex.EncodeToString(l.Hash), Sig: l.Sig, Key: l.Key}
		if l.Kind == LinkEntry {
			line.EntryHash = hex.EncodeToString(l.Body)
		} else {
			line.Body = l.Body
		}
		if e != nil {
			x := &exportEntry{Seq: e.Seq, ID: e.ID, Time: formatTime(e.Time), Recorded: formatTime(e.Recorded), Rule: e.Rule,
				Type: string(e.Type), Group: e.Group, Resource: e.Resource, Namespace: e.Namespace, Name: e.Name, UID: e.UID,
				User: e.User, Impersonated: e.Impersonated, Source: string(e.Source)}
			compact.Reset()
			if json.Compact(&compact, e.Payload) == nil && bytes.Equal(compact.Bytes(), e.Payload) {
				x.Payload = e.Payload
			} else {
				x.PayloadBase64 = e.Payload
				if x.PayloadBase64 == nil {
					x.PayloadBase64 = []byte{}
				}
			}
			line.Entry = x
		}
		return enc.Encode(&line)
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// maxExportLine bounds an export's line: a payload is bounded well
// below it.
const maxExportLine = 64 << 20

// ReadExport reads an export: its header, then each link with its
// entry. Its errors name the line.
func ReadExport(r io.Reader, each func(l *Link, e *Entry) error) (ExportHeader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxExportLine)
	var h ExportHeader
	n := 0
	for sc.Scan() {
		n++
		if n == 1 {
			if err := json.Unmarshal(sc.Bytes(), &h); err != nil || h.Kind != "header" {
				return h, fmt.Errorf("line 1: not the header of a fieldwatch trail export")
			}
			if h.Format != ExportFormat {
				return h, fmt.Errorf("line 1: format %q: want %q", h.Format, ExportFormat)
			}
			continue
		}
		l, e, err := parseLine(sc.Bytes())
		if err != nil {
			return h, fmt.Errorf("line %d: %w", n, err)
		}
		if err := each(l, e); err != nil {
			return h, err
		}
	}
	if err := sc.Err(); err != nil {
		return h, fmt.Errorf("line %d: %w", n+1, err)
	}
	if n == 0 {
		return h, errors.New("empty: not a fieldwatch trail export")
	}
	return h, nil
}

func parseLine(b []byte) (*Link, *Entry, error) {
	var x exportLine
	if err := json.Unmarshal(b, &x); err != nil {
		return nil, nil, err
	}
	l := &Link{Chain: x.Chain, Pos: x.Pos, Kind: x.Kind, Ref: x.Ref, Sig: x.Sig, Key: x.Key}
	var err error
	if l.Time, err = exportedTime("time", x.Time); err != nil {
		return nil, nil, err
	}
	if l.At, err = exportedTime("at", x.At); err != nil {
		return nil, nil, err
	}
	if l.Prev, err = hex.DecodeString(x.Prev); err != nil {
		return nil, nil, fmt.Errorf("prev: %w", err)
	}
	if l.Hash, err = hex.DecodeString(x.Hash); err != nil {
		return nil, nil, fmt.Errorf("hash: %w", err)
	}
	if l.Kind == LinkEntry {
		if l.Body, err = hex.DecodeString(x.EntryHash); err != nil {
			return nil, nil, fmt.Errorf("entryHash: %w", err)
		}
	} else {
		l.Body = x.Body
	}
	if x.Entry == nil {
		return l, nil, nil
	}
	y := x.Entry
	e := &Entry{Seq: y.Seq, ID: y.ID, Rule: y.Rule, Type: change.Type(y.Type), Group: y.Group, Resource: y.Resource,
		Namespace: y.Namespace, Name: y.Name, UID: y.UID, User: y.User, Impersonated: y.Impersonated, Source: Source(y.Source), Payload: y.Payload}
	if y.PayloadBase64 != nil {
		e.Payload = y.PayloadBase64
	}
	if e.Time, err = exportedTime("entry.time", y.Time); err != nil {
		return nil, nil, err
	}
	if e.Recorded, err = exportedTime("entry.recorded", y.Recorded); err != nil {
		return nil, nil, err
	}
	l.fromEntry(e) // what the link commits to is the row
	return l, e, nil
}

func exportedTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", field, err)
	}
	return t.UTC(), nil
}
