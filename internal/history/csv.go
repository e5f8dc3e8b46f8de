package history

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fieldwatch/fieldwatch/payload"
)

// CSVHeader is the first row of WriteCSV's output.
var CSVHeader = []string{"time", "type", "group", "resource", "namespace", "name", "user", "impersonated", "manager", "rule", "id", "op", "path", "old", "new", "note", "cluster"}

// WriteCSV writes the trail's entries that walk visits (Trail.Links, or
// ReadExport over an export) as CSV for a spreadsheet: a header row
// (CSVHeader), then one row per change of each entry (an entry without
// changes, a creation or deletion, has one row with no op), and one row
// of type "gap" per gap record with its count, time range and reasons
// in note (an entry whose payload does not decode has one row saying
// so in note). Values are JSON, but a string is written as it is; a cell
// that a spreadsheet would read as a formula (=, +, -, @, a tab or a
// carriage return first, and not a number) gets a leading '. The CSV is
// for reading: what verifies is the JSON Lines export.
func WriteCSV(w io.Writer, walk func(each func(*Link, *Entry) error) error) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	cw := csv.NewWriter(bw)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	var p payload.Payload
	row := make([]string, len(CSVHeader))
	err := walk(func(l *Link, e *Entry) error {
		switch {
		case l.Kind == LinkGap:
			var g GapBody
			if err := json.Unmarshal(l.Body, &g); err != nil {
				return fmt.Errorf("chain %q position %d: the gap record: %w", l.Chain, l.Pos, err)
			}
			clear(row)
			row[0], row[1], row[15] = csvTime(l.At), "gap", gapNote(&g)
			return cw.Write(row)
		case l.Kind != LinkEntry || e == nil:
			return nil // other links, and entries the bounds removed
		}
		head := []string{csvTime(e.Time), string(e.Type), e.Group, e.Resource, e.Namespace, e.Name,
			e.User, e.Impersonated, e.Manager, e.Rule, e.ID}
		perr := payload.Unmarshal(e.Payload, &p)
		if perr != nil || len(p.Changes) == 0 {
			clear(row)
			copy(row, head)
			row[16] = e.Cluster
			if perr != nil {
				row[15] = "the payload does not decode: " + perr.Error()
			}
			return cw.Write(csvSafe(row))
		}
		for _, c := range p.Changes {
			clear(row)
			copy(row, head)
			row[16] = e.Cluster
			row[11], row[12], row[13], row[14] = string(c.Op), c.Path, csvValue(c.OldValue), csvValue(c.Value)
			if err := cw.Write(csvSafe(row)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return err
	}
	return bw.Flush()
}

func csvTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// csvValue is a change's JSON value for a cell: a string as it is,
// anything else as JSON; "" when absent.
func csvValue(v json.RawMessage) string {
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return string(v)
}

// csvSafe prefixes with ' each cell a spreadsheet would take for a
// formula (OWASP's CSV injection advice), leaving numbers alone.
func csvSafe(row []string) []string {
	for i, c := range row {
		if c == "" || !strings.ContainsRune("=+-@\t\r", rune(c[0])) {
			continue
		}
		if _, err := strconv.ParseFloat(c, 64); err == nil {
			continue
		}
		row[i] = "'" + c
	}
	return row
}

// gapNote says what a gap record counts.
func gapNote(g *GapBody) string {
	reasons := make([]string, 0, len(g.Reasons))
	for r, n := range g.Reasons {
		reasons = append(reasons, fmt.Sprintf("%s %d", r, n))
	}
	sort.Strings(reasons)
	return fmt.Sprintf("%d payloads not kept, %s to %s (%s)", g.Count, csvTime(g.From), csvTime(g.To), strings.Join(reasons, ", "))
}
