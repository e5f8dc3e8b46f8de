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
	"runtime"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

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
	Cluster      string `json:"cluster,omitempty"`
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
// when the trail was read. The store is read on the caller's goroutine
// while another encodes and writes what it read: the two take about as
// long (BenchmarkTrailExportVerify).
func Export(ctx context.Context, t Trail, w io.Writer, now time.Time) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	header, _ := json.Marshal(ExportHeader{Kind: "header", Format: ExportFormat, Exported: now.UTC()})
	if _, err := bw.Write(append(header, '\n')); err != nil {
		return err
	}
	type row struct {
		l *Link
		e *Entry
	}
	const batchRows = 256
	batches := make(chan []row, 4)
	failed := make(chan struct{}) // closed when the encoder fails
	done := make(chan struct{})
	var encErr error
	go func() {
		defer close(done)
		var le linkEncoder
		for b := range batches {
			for _, r := range b {
				if encErr != nil {
					break // drain
				}
				if encErr = le.write(bw, r.l, r.e); encErr != nil {
					close(failed)
				}
			}
		}
	}()
	batch := make([]row, 0, batchRows)
	send := func() error {
		select {
		case batches <- batch:
			batch = make([]row, 0, batchRows)
			return nil
		case <-failed:
			return errEncoderFailed
		}
	}
	err := t.Links(ctx, func(l *Link, e *Entry) error {
		if batch = append(batch, row{l, e}); len(batch) == batchRows {
			return send()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = send()
	}
	close(batches)
	<-done
	switch {
	case encErr != nil:
		return encErr
	case err != nil:
		return err
	}
	return bw.Flush()
}

// errEncoderFailed stops the walk of a failed export.
var errEncoderFailed = errors.New("export: the encoder failed")

// linkEncoder writes links as an export's lines.
type linkEncoder struct {
	buf, compact bytes.Buffer
	enc          *json.Encoder
}

// write writes l, with e, as a line to w. A payload that is compact JSON
// is checked so once and appended as it is: encoding/json would compact
// it again (BenchmarkTrailExportVerify); another is written in base64.
func (le *linkEncoder) write(w io.Writer, l *Link, e *Entry) error {
	if le.enc == nil {
		le.enc = json.NewEncoder(&le.buf)
		le.enc.SetEscapeHTML(false)
	}
	le.buf.Reset()
	line := exportLine{Kind: l.Kind, Chain: l.Chain, Pos: l.Pos, Ref: l.Ref, Time: formatTime(l.Time), At: formatTime(l.At),
		Prev: hex.EncodeToString(l.Prev), Hash: hex.EncodeToString(l.Hash), Sig: l.Sig, Key: l.Key}
	if l.Kind == LinkEntry {
		line.EntryHash = hex.EncodeToString(l.Body)
	} else {
		line.Body = l.Body
	}
	var raw []byte // the payload, appended after the row's other fields
	if e != nil {
		x := &exportEntry{Seq: e.Seq, ID: e.ID, Time: formatTime(e.Time), Recorded: formatTime(e.Recorded), Rule: e.Rule,
			Type: string(e.Type), Group: e.Group, Resource: e.Resource, Namespace: e.Namespace, Name: e.Name, UID: e.UID,
			User: e.User, Impersonated: e.Impersonated, Cluster: e.Cluster, Source: string(e.Source)}
		le.compact.Reset()
		if len(e.Payload) > 0 && json.Compact(&le.compact, e.Payload) == nil && bytes.Equal(le.compact.Bytes(), e.Payload) {
			raw = e.Payload
		} else {
			x.PayloadBase64 = e.Payload
		}
		line.Entry = x
	}
	if err := le.enc.Encode(&line); err != nil {
		return err
	}
	b := le.buf.Bytes()
	if raw != nil {
		// The line ends with the entry's object and the line's: "}}\n".
		b = append(append(append(b[:len(b)-3], `,"payload":`...), raw...), "}}\n"...)
	}
	_, err := w.Write(b)
	return err
}

// maxExportLine bounds an export's line: a payload is bounded well
// below it.
const maxExportLine = 64 << 20

// ReadExport reads an export: its header, then each link with its
// entry. Its errors name the line. Lines are parsed in batches, on as
// many goroutines as there are CPUs (at most 4), and handed to each in
// order (BenchmarkTrailExportVerify); a batch holds at most
// readBatchLines lines and readBatchBytes bytes beyond its last line.
func ReadExport(r io.Reader, each func(l *Link, e *Entry) error) (ExportHeader, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), maxExportLine)
	var h ExportHeader
	n := 0
	var (
		arena []byte
		ends  []int // of each line in arena
		first int   // the line number of the batch's first line
	)
	flush := func() error {
		err := parseBatch(arena, ends, first, each)
		arena, ends = arena[:0], ends[:0]
		return err
	}
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
		if len(ends) == 0 {
			first = n
		}
		arena = append(arena, sc.Bytes()...)
		ends = append(ends, len(arena))
		if len(ends) == readBatchLines || len(arena) >= readBatchBytes {
			if err := flush(); err != nil {
				return h, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		if ferr := flush(); ferr != nil {
			return h, ferr
		}
		return h, fmt.Errorf("line %d: %w", n+1, err)
	}
	if n == 0 {
		return h, errors.New("empty: not a fieldwatch trail export")
	}
	return h, flush()
}

const (
	readBatchLines = 1024
	readBatchBytes = 8 << 20
)

// parseBatch parses the lines of arena that end at ends, the first being
// line first, on up to 4 goroutines, then hands them to each in order.
// The first line that does not parse ends it with its error.
func parseBatch(arena []byte, ends []int, first int, each func(l *Link, e *Entry) error) error {
	type parsed struct {
		l   *Link
		e   *Entry
		err error
	}
	out := make([]parsed, len(ends))
	workers := min(runtime.GOMAXPROCS(0), 4, max(len(ends)/64, 1))
	per := (len(ends) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(ends); lo += per {
		hi := min(lo+per, len(ends))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				start := 0
				if i > 0 {
					start = ends[i-1]
				}
				out[i].l, out[i].e, out[i].err = parseLine(arena[start:ends[i]])
			}
		})
	}
	wg.Wait()
	for i := range out {
		if out[i].err != nil {
			return fmt.Errorf("line %d: %w", first+i, out[i].err)
		}
		if err := each(out[i].l, out[i].e); err != nil {
			return err
		}
	}
	return nil
}

// parseLine reads a link's line. It decodes with the JSON v2 library,
// in one pass where encoding/json validates the line before it decodes
// it (BenchmarkTrailExportVerify).
func parseLine(b []byte) (*Link, *Entry, error) {
	var x exportLine
	if err := jsonv2.Unmarshal(b, &x); err != nil {
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
		Namespace: y.Namespace, Name: y.Name, UID: y.UID, User: y.User, Impersonated: y.Impersonated, Cluster: y.Cluster,
		Source: Source(y.Source), Payload: y.Payload}
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
