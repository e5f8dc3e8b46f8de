package rules

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/fieldpath"
)

// The user selectors of a rule's match (users, excludeUsers) and the
// audit attribution a change carries (Change.Attribution).
//
// An entry is a glob on the username of the identity the change was made
// as: the impersonated user when the request impersonated one, otherwise
// the authenticated user. An entry "group:GLOB" is a glob on that
// identity's groups instead. In a glob, * matches any run of characters
// (":" and "/" included), ? one character, and \ makes the next character
// literal; everything else is literal.
//
// Whether a change's user matches can be undecided: no attribution at all
// (fieldwatch runs without an audit source), no audit event in time
// (match none), or writes by several identities (ambiguous) of which the
// candidates' usernames do not settle it. users then does not match and
// excludeUsers does not exclude: an auditor prefers a payload to a silent
// drop. An ambiguous change is decided when every candidate's username
// matches a username entry (then it matches, whoever of them wrote it);
// group entries cannot be checked for candidates, whose groups the
// attribution does not give.

// userGlobs is a compiled users or excludeUsers list.
type userGlobs struct {
	names  *regexp.Regexp // username globs; nil: none
	groups *regexp.Regexp // group globs; nil: none
}

// groupPrefix marks a group entry of users and excludeUsers.
const groupPrefix = "group:"

// userGlobs compiles a users or excludeUsers list at field path p (nil
// for an empty one).
func (c *compiler) userGlobs(entries []string, p string) *userGlobs {
	if len(entries) == 0 {
		return nil
	}
	var names, groups []string
	for i, e := range entries {
		ep := fieldpath.Item(p, i)
		glob, isGroup := strings.CutPrefix(e, groupPrefix)
		re, err := globRegexp(glob)
		switch {
		case strings.TrimSpace(glob) == "" && isGroup:
			c.errorf(ep, "%q names no group: write group:NAME (a glob)", e)
		case strings.TrimSpace(glob) == "":
			c.errorf(ep, "empty user glob")
		case err != nil:
			c.errorf(ep, "%q is not a valid glob: %v", e, err)
		case isGroup:
			groups = append(groups, re)
		default:
			names = append(names, re)
		}
	}
	g := &userGlobs{}
	if len(names) > 0 {
		g.names = regexp.MustCompile("^(?:" + strings.Join(names, "|") + ")$")
	}
	if len(groups) > 0 {
		g.groups = regexp.MustCompile("^(?:" + strings.Join(groups, "|") + ")$")
	}
	return g
}

// globRegexp translates a glob (*, ?, \ escapes) into a regular expression
// body. Go's regexp runs in time linear in the input.
func globRegexp(glob string) (string, error) {
	var b strings.Builder
	b.WriteString("(?:")
	for i := 0; i < len(glob); i++ {
		switch ch := glob[i]; ch {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		case '\\':
			if i+1 == len(glob) {
				return "", fmt.Errorf("ends with a lone \\")
			}
			i++
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		default:
			b.WriteString(regexp.QuoteMeta(glob[i : i+1]))
		}
	}
	b.WriteString(")")
	return b.String(), nil
}

// decide says whether the user of a change with attribution a matches g,
// and whether that can be decided at all (see above).
func (g *userGlobs) decide(a *change.Attribution) (matched, decided bool) {
	if a == nil {
		return false, false
	}
	switch {
	case a.Match.Attributed():
		u := a.Effective()
		if u == nil {
			return false, false
		}
		if g.names != nil && g.names.MatchString(u.Username) {
			return true, true
		}
		if g.groups != nil && slices.ContainsFunc(u.Groups, g.groups.MatchString) {
			return true, true
		}
		return false, true
	case a.Match == change.MatchAmbiguous && len(a.Candidates) > 0 && g.names != nil:
		for _, name := range a.Candidates {
			if !g.names.MatchString(name) {
				return false, false
			}
		}
		return true, true
	}
	return false, false
}

// userFilter is the user part of a rule's match.
type userFilter struct {
	users, exclude *userGlobs
}

// allows reports whether a change with attribution a passes f: users (when
// set) must match, excludeUsers (when set) must not; undecided, users does
// not match and excludeUsers does not exclude.
func (f *userFilter) allows(a *change.Attribution) bool {
	if f.users != nil {
		if m, decided := f.users.decide(a); !m || !decided {
			return false
		}
	}
	if f.exclude != nil {
		if m, decided := f.exclude.decide(a); m && decided {
			return false
		}
	}
	return true
}

// set reports whether the filter has users or excludeUsers.
func (f *userFilter) set() bool { return f.users != nil || f.exclude != nil }

// appendActor appends the payload's actor (docs/payload.md): the
// managedFields manager and operation when known, then the attribution's
// fields when the change has one, absent ones left out. ok is false when
// there is nothing to say (no actor key).
func appendActor(b []byte, mf managerActor, hasMF bool, a *change.Attribution) ([]byte, bool) {
	if !hasMF && a == nil {
		return b, false
	}
	b = append(b, `,"actor":{`...)
	sep := false
	key := func(k string) {
		if sep {
			b = append(b, ',')
		}
		sep = true
		b = appendJSONString(b, k)
		b = append(b, ':')
	}
	if hasMF {
		key("manager")
		b = appendJSONString(b, mf.Manager)
		key("operation")
		b = appendJSONString(b, mf.Operation)
	}
	if a != nil {
		if a.User != nil {
			key("user")
			b = appendUser(b, a.User)
		}
		if a.ImpersonatedUser != nil {
			key("impersonatedUser")
			b = appendUser(b, a.ImpersonatedUser)
		}
		if a.Verb != "" {
			key("verb")
			b = appendJSONString(b, a.Verb)
		}
		if a.UserAgent != "" {
			key("userAgent")
			b = appendJSONString(b, a.UserAgent)
		}
		if len(a.SourceIPs) > 0 {
			key("sourceIPs")
			b = appendStrings(b, a.SourceIPs)
		}
		if a.AuditID != "" {
			key("auditID")
			b = appendJSONString(b, a.AuditID)
		}
		if a.Source != "" {
			key("source")
			b = appendJSONString(b, a.Source)
		}
		key("match")
		m := a.Match
		if m == "" {
			m = change.MatchNone
		}
		b = appendJSONString(b, string(m))
		if len(a.Candidates) > 0 {
			key("candidates")
			b = appendStrings(b, a.Candidates)
		}
	}
	return append(b, '}'), true
}

// appendGuard appends the payload's "guard" key (payload.Guard), the CRD
// guard's override of the request that made the change, when a says there
// was one.
func appendGuard(b []byte, a *change.Attribution) []byte {
	if a == nil || a.Guard == nil {
		return b
	}
	g := a.Guard
	b = append(b, `,"guard":{"overridden":`...)
	b = strconv.AppendBool(b, g.Overridden)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, g.Reason)
	b = append(b, `,"user":`...)
	b = appendJSONString(b, g.User)
	if len(g.Groups) > 0 {
		b = append(b, `,"groups":`...)
		b = appendStrings(b, g.Groups)
	}
	b = append(b, `,"operation":`...)
	b = appendJSONString(b, g.Operation)
	b = append(b, `,"requestUID":`...)
	b = appendJSONString(b, g.RequestUID)
	b = append(b, `,"checks":`...)
	b = appendStrings(b, g.Checks)
	b = append(b, `,"objects":`...)
	b = strconv.AppendInt(b, int64(g.Objects), 10)
	return append(b, '}')
}

// appendUser appends a user as {"username", "uid", "groups"}, the last two
// only when set.
func appendUser(b []byte, u *change.UserInfo) []byte {
	b = append(b, `{"username":`...)
	b = appendJSONString(b, u.Username)
	if u.UID != "" {
		b = append(b, `,"uid":`...)
		b = appendJSONString(b, u.UID)
	}
	if len(u.Groups) > 0 {
		b = append(b, `,"groups":`...)
		b = appendStrings(b, u.Groups)
	}
	if len(u.Extra) > 0 {
		b = append(b, `,"extra":{`...)
		for i, k := range slices.Sorted(maps.Keys(u.Extra)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendStrings(b, u.Extra[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendStrings appends a JSON list of strings.
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// actorValue is the CEL variable actor of a change: every key always
// present, "" and empty lists for what is unknown, so that expressions
// need no has() (docs/rules.md).
func actorValue(c *Change) map[string]any {
	mf, _ := actorOf(c, nil)
	a := c.Attribution
	if a == nil {
		a = &change.Attribution{}
	}
	m := string(a.Match)
	if m == "" {
		m = string(change.MatchNone)
	}
	return map[string]any{
		"manager":          mf.Manager,
		"operation":        mf.Operation,
		"user":             userValue(a.User),
		"impersonatedUser": userValue(a.ImpersonatedUser),
		"verb":             a.Verb,
		"userAgent":        a.UserAgent,
		"sourceIPs":        stringsValue(a.SourceIPs),
		"auditID":          a.AuditID,
		"source":           a.Source,
		"match":            m,
		"candidates":       stringsValue(a.Candidates),
	}
}

func userValue(u *change.UserInfo) map[string]any {
	if u == nil {
		u = &change.UserInfo{}
	}
	extra := make(map[string]any, len(u.Extra))
	for k, vs := range u.Extra {
		extra[k] = stringsValue(vs)
	}
	return map[string]any{"username": u.Username, "uid": u.UID, "groups": stringsValue(u.Groups), "extra": extra}
}

func stringsValue(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// actorManagedFieldsKeys are the keys of the CEL actor that managedFields
// give; the others need the audit stream.
var actorManagedFieldsKeys = map[string]bool{"manager": true, "operation": true}

// WriteSubresource returns the subresource ("" for the main resource) that
// the update c went through, as the metadata.managedFields entries the
// write stamped tell (a new entry, or one whose time changed): ok is false
// when none was stamped (a write in the same second as the manager's
// previous one, or one that changed no managed field) or when they
// disagree. Audit attribution uses it to tell a status write from a spec
// write.
func WriteSubresource(c *Change) (sub string, ok bool) {
	if c.Type != change.Updated {
		return "", false
	}
	old := managedFields(c.Old)
	for _, e := range managedFields(c.New) {
		entry, isMap := e.(map[string]any)
		if !isMap || touched(entry, old) != 2 {
			continue
		}
		s, _ := entry["subresource"].(string)
		if ok && s != sub {
			return "", false
		}
		sub, ok = s, true
	}
	return sub, ok
}
