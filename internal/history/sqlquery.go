package history

import (
	"context"
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
	if q.Cluster != "" {
		b.filter("cluster = ?", q.Cluster)
	}
	if q.Type != "" {
		b.filter("type = ?", string(q.Type))
	}
	if a := q.Access; a != nil && !a.empty() {
		grs := append(append([]GroupResource(nil), a.Resources...), a.Checked...)
		args := make([]any, 0, 2*len(grs))
		for _, gr := range grs {
			args = append(args, gr.Group, gr.Resource)
		}
		b.filter("(grp, resource) IN (VALUES "+strings.TrimSuffix(strings.Repeat("(?, ?), ", len(grs)), ", ")+")", args...)
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

// headColumns are the columns headOf reads, of a table whose time
// column is timeColumn, whose cluster is read from cluster and whose
// payload's length is length.
func headColumns(timeColumn, cluster, length string) string {
	return "seq, " + timeColumn + ", id, recorded, rule, type, grp, resource, namespace, name, uid, usr, imp, " + cluster + ", source, " + length
}

// window returns the query of the scan window's last index entry and of
// how many entries the window holds, for a query with residual
// conditions: its time, seq and the count (no row when the range is
// empty).
func (b *built) window(from string) (string, []any) {
	order := " ORDER BY seq"
	if !b.keyed {
		order = " ORDER BY t, seq"
	}
	return "WITH w AS (SELECT " + b.timeColumn() + " AS t, seq FROM " + from + where(b.keyConds) + b.order() + " LIMIT " + strconv.Itoa(scanWindow) +
		") SELECT t, seq, (SELECT count(*) FROM w) FROM w" + order + " LIMIT 1", b.keyArgs
}

// heads returns the query of at most limit heads (columns), within the
// window that ends at bound (when not nil), older than after (when not
// nil), of none of the resources and namespaces of refused.
func (b *built) heads(from, columns string, limit int, bound, after *Cursor, refused []Ref) (string, []any) {
	conds := append(append([]string(nil), b.keyConds...), b.residual...)
	args := append(append([]any(nil), b.keyArgs...), b.resArgs...)
	if cond, cargs := notRefused(refused); cond != "" {
		conds, args = append(conds, cond), append(args, cargs...)
	}
	switch {
	case bound != nil && b.keyed:
		conds = append(conds, "seq >= ?")
		args = append(args, bound.Seq)
	case bound != nil:
		conds = append(conds, "(time, seq) >= (?, ?)")
		args = append(args, bound.Time, bound.Seq)
	}
	switch {
	case after != nil && b.keyed:
		conds = append(conds, "seq < ?")
		args = append(args, after.Seq)
	case after != nil:
		conds = append(conds, "(time, seq) < (?, ?)")
		args = append(args, after.Time, after.Seq)
	}
	return "SELECT " + columns + " FROM " + from + where(conds) + b.order() + " LIMIT " + strconv.Itoa(limit), args
}

// notRefused returns the condition that leaves out the entries of the
// resources and namespaces of refused ("" when there are none).
func notRefused(refused []Ref) (string, []any) {
	if len(refused) == 0 {
		return "", nil
	}
	args := make([]any, 0, 3*len(refused))
	for _, r := range refused {
		args = append(args, r.Group, r.Resource, r.Namespace)
	}
	return "(grp, resource, namespace) NOT IN (VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?, ?), ", len(refused)), ", ") + ")", args
}

// sqlSource reads heads with SQL: the embedded store's queries by time and
// every query of PostgreSQL. A query with residual conditions goes
// through its scan window, whose end it finds first.
type sqlSource struct {
	db           querier
	b            *built
	from         string
	columns      string
	placeholders func(string) string

	started bool
	bound   *Cursor // the window's last entry; nil when the range ends within it
	count   int     // the window's entries, or the heads read without one
	last    *Cursor // the last head read
	done    bool
}

func (s *sqlSource) windowed() bool { return len(s.b.residual) > 0 }

func (s *sqlSource) next(ctx context.Context, n int, refused []Ref) ([]head, bool, error) {
	if s.done {
		return nil, false, nil
	}
	if !s.started && s.windowed() {
		sqlText, args := s.b.window(s.from)
		var c Cursor
		ok, err := s.db.queryRow(ctx, s.placeholders(sqlText), args, &c.Time, &c.Seq, &s.count)
		if err != nil {
			return nil, false, err
		}
		if ok && s.count >= scanWindow {
			s.bound = &c
		}
	}
	s.started = true
	sqlText, args := s.b.heads(s.from, s.columns, n, s.bound, s.last, refused)
	var heads []head
	err := s.db.query(ctx, s.placeholders(sqlText), args, func(scan func(dest ...any) error) error {
		h, err := headOf(scan)
		if err == nil {
			heads = append(heads, h)
		}
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if !s.windowed() {
		s.count += len(heads)
	}
	if len(heads) > 0 {
		c := heads[len(heads)-1].cursor()
		s.last = &c
	}
	s.done = len(heads) < n
	return heads, !s.done, nil
}

func (s *sqlSource) scanned() int { return s.count }

func (s *sqlSource) windowEnd() *Cursor { return s.bound }

// loadSQL reads the entries of seqs from table from.
func loadSQL(ctx context.Context, db querier, from string, placeholders func(string) string, seqs []int64) (map[int64]Entry, error) {
	in := strings.TrimSuffix(strings.Repeat("?, ", len(seqs)), ", ")
	args := make([]any, len(seqs))
	for i, seq := range seqs {
		args[i] = seq
	}
	out := make(map[int64]Entry, len(seqs))
	err := db.query(ctx, placeholders("SELECT seq, recorded, source, payload FROM "+from+" WHERE seq IN ("+in+")"), args,
		func(scan func(dest ...any) error) error {
			e, err := scanEntry(scan)
			if err == nil {
				out[e.Seq] = e
			}
			return err
		})
	return out, err
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
