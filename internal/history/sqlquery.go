package history

import (
	"strconv"
	"strings"
)

// The SQL both stores share: one table, entries, newest first by (time,
// seq). Every value is a parameter; only fixed fragments are joined.

// scanWindow bounds the index entries one query goes through when it
// filters on columns its index does not order (name, resource, user,
// rule, type): a page of such a query stops there, with a cursor to go
// on, so that a rare value costs a bounded time per page.
var scanWindow = 20000

// index names which index a query walks.
type index int

const (
	byTime index = iota
	byUID
	byNamespace
)

// built is a query's SQL in parts, with ? placeholders.
type built struct {
	// keyed is SQLite's table, whose key seq is in time order
	// (seqOf): time conditions are conditions on seq. Otherwise the
	// order is (time, seq).
	keyed bool
	index index
	// keyConds are the conditions on the walked index (its equality and
	// the time range and cursor); residual the others.
	keyConds, residual []string
	keyArgs, resArgs   []any
}

func build(q *Query, keyed bool) built {
	b := built{keyed: keyed}
	switch {
	case q.UID != "":
		b.index = byUID
		b.key("uid = ?", q.UID)
		if q.Namespace != "" {
			b.filter("namespace = ?", q.Namespace)
		}
	case q.Namespace != "":
		b.index = byNamespace
		b.key("namespace = ?", q.Namespace)
	}
	switch {
	case keyed:
		if !q.Since.IsZero() {
			b.key("seq >= ?", seqOf(q.Since))
		}
		if !q.Until.IsZero() {
			b.key("seq < ?", seqOf(q.Until))
		}
		if q.After != nil {
			b.key("seq < ?", q.After.Seq)
		}
	default:
		if !q.Since.IsZero() {
			b.key("time >= ?", clampTime(q.Since).UnixMicro())
		}
		if !q.Until.IsZero() {
			b.key("time < ?", clampTime(q.Until).UnixMicro())
		}
		if q.After != nil {
			b.key("(time, seq) < (?, ?)", q.After.Time, q.After.Seq)
		}
	}
	if q.Name != "" {
		b.filter("name = ?", q.Name)
	}
	if q.Resource != "" {
		b.filter("resource = ?", q.Resource)
	}
	if q.GroupSet {
		b.filter("grp = ?", q.Group)
	}
	if q.User != "" {
		b.filter("(usr = ? OR imp = ?)", q.User, q.User)
	}
	if q.Rule != "" {
		b.filter("rule = ?", q.Rule)
	}
	if q.Type != "" {
		b.filter("type = ?", string(q.Type))
	}
	return b
}

func (b *built) key(cond string, args ...any) {
	b.keyConds = append(b.keyConds, cond)
	b.keyArgs = append(b.keyArgs, args...)
}

func (b *built) filter(cond string, args ...any) {
	b.residual = append(b.residual, cond)
	b.resArgs = append(b.resArgs, args...)
}

// where joins conditions with AND.
func where(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// order is the newest first order.
func (b *built) order() string {
	if b.keyed {
		return " ORDER BY seq DESC"
	}
	return " ORDER BY time DESC, seq DESC"
}

// timeColumn is what the time of an entry is read from.
func (b *built) timeColumn() string {
	if b.keyed {
		return "seq / " + strconv.Itoa(seqSpan)
	}
	return "time"
}

// boundary returns the query of the last index entry of the scan window,
// for a query with residual conditions: its time and seq.
func (b *built) boundary(from string) (string, []any) {
	return "SELECT " + b.timeColumn() + ", seq FROM " + from + where(b.keyConds) + b.order() + " LIMIT 1 OFFSET " + strconv.Itoa(scanWindow-1), b.keyArgs
}

// page returns the query of a page of at most limit entries, within the
// window that ends at bound (when not nil).
func (b *built) page(from, columns string, limit int, bound *Cursor) (string, []any) {
	conds := append(append([]string(nil), b.keyConds...), b.residual...)
	args := append(append([]any(nil), b.keyArgs...), b.resArgs...)
	switch {
	case bound != nil && b.keyed:
		conds = append(conds, "seq >= ?")
		args = append(args, bound.Seq)
	case bound != nil:
		conds = append(conds, "(time, seq) >= (?, ?)")
		args = append(args, bound.Time, bound.Seq)
	}
	return "SELECT " + columns + " FROM " + from + where(conds) + b.order() + " LIMIT " + strconv.Itoa(limit), args
}

// dollars rewrites ? placeholders as $1, $2, ... (PostgreSQL); the
// fragments above hold no ? of their own elsewhere.
func dollars(s string) string {
	var sb strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			sb.WriteByte('$')
			sb.WriteString(strconv.Itoa(n))
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}
