package rules

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/payload"
)

// TestUserGlobErrors: users and excludeUsers entries that are not valid
// globs are errors at their field path.
func TestUserGlobErrors(t *testing.T) {
	tests := []struct {
		name, match, want string
	}{
		{"empty user", `users: [""]`, `rules[0].match.users[0]: empty user glob`},
		{"group without a name", `excludeUsers: ["group:"]`, `rules[0].match.excludeUsers[0]: "group:" names no group`},
		{"lone backslash", `users: ['alice\']`, `rules[0].match.users[0]: "alice\\" is not a valid glob: ends with a lone \`},
		{"second entry", `users: [alice, "  "]`, `rules[0].match.users[1]: empty user glob`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := rule("    match: {resources: [{group: \"\", resource: configmaps}], " + tt.match + "}\n" + logAction)
			_, err := Parse("f.yaml", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestUsersDecide: how users and excludeUsers decide for each kind of
// attribution, undecided ones included.
func TestUsersDecide(t *testing.T) {
	alice := &change.UserInfo{Username: "alice", Groups: []string{"dev", "system:authenticated"}}
	admin := &change.UserInfo{Username: "admin", Groups: []string{"system:masters"}}
	flux := &change.UserInfo{Username: "system:serviceaccount:flux-system:kustomize-controller", Groups: []string{"system:serviceaccounts"}}
	oidc := &change.UserInfo{Username: "https://issuer.example.com#1234"}
	exact := func(u *change.UserInfo) *change.Attribution {
		return &change.Attribution{Match: change.MatchExact, User: u}
	}
	as := func(u, imp *change.UserInfo) *change.Attribution {
		return &change.Attribution{Match: change.MatchWindow, User: u, ImpersonatedUser: imp}
	}
	ambiguous := func(names ...string) *change.Attribution {
		return &change.Attribution{Match: change.MatchAmbiguous, Candidates: names}
	}
	none := &change.Attribution{Match: change.MatchNone}
	tests := []struct {
		name          string
		users, except []string
		a             *change.Attribution
		want          bool
	}{
		{"user by name", []string{"alice"}, nil, exact(alice), true},
		{"other user", []string{"alice"}, nil, exact(admin), false},
		{"user glob", []string{"ali*"}, nil, exact(alice), true},
		{"question mark", []string{"alic?"}, nil, exact(alice), true},
		{"glob is anchored", []string{"lice"}, nil, exact(alice), false},
		{"star crosses : and /", []string{"https://issuer.example.com#*"}, nil, exact(oidc), true},
		{"escaped star is literal", []string{`ali\*`}, nil, exact(alice), false},
		{"dot is literal", []string{"a.ice"}, nil, exact(alice), false},
		{"group", []string{"group:dev"}, nil, exact(alice), true},
		{"group glob", []string{"group:system:*"}, nil, exact(admin), true},
		{"group is not a username", []string{"group:alice"}, nil, exact(alice), false},
		{"impersonated user is the identity", []string{"alice"}, nil, as(admin, alice), true},
		{"impersonator is not", []string{"admin"}, nil, as(admin, alice), false},
		{"impersonated user's groups", []string{"group:system:masters"}, nil, as(admin, alice), false},
		{"exclude a controller", nil, []string{"system:serviceaccount:flux-system:*"}, exact(flux), false},
		{"keep a person", nil, []string{"system:serviceaccount:flux-system:*"}, exact(alice), true},
		{"exclude by group", nil, []string{"group:system:serviceaccounts"}, exact(flux), false},
		{"both: included and not excluded", []string{"group:dev"}, []string{"bob"}, exact(alice), true},
		{"both: included and excluded", []string{"group:dev"}, []string{"alice"}, exact(alice), false},
		{"no attribution: users does not match", []string{"*"}, nil, nil, false},
		{"no attribution: excludeUsers keeps", nil, []string{"*"}, nil, true},
		{"none: users does not match", []string{"*"}, nil, none, false},
		{"none: excludeUsers keeps", nil, []string{"*"}, none, true},
		{"ambiguous: users does not match", []string{"alice"}, nil, ambiguous("alice", "bob"), false},
		{"ambiguous: excludeUsers keeps", nil, []string{"alice"}, ambiguous("alice", "bob"), true},
		{"ambiguous, every candidate matches", []string{"alice", "bob"}, nil, ambiguous("alice", "bob"), true},
		{"ambiguous, every candidate excluded", nil, []string{"system:serviceaccount:*"}, ambiguous("system:serviceaccount:a:x", "system:serviceaccount:b:y"), false},
		{"ambiguous, groups cannot decide", []string{"group:*"}, nil, ambiguous("alice", "bob"), false},
		{"neither set", nil, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c compiler
			f := userFilter{users: c.userGlobs(tt.users, "users"), exclude: c.userGlobs(tt.except, "excludeUsers")}
			if len(c.errs) > 0 {
				t.Fatal(c.errs)
			}
			if got := f.allows(tt.a); got != tt.want {
				t.Errorf("users %q excludeUsers %q on %+v: %v, want %v", tt.users, tt.except, tt.a, got, tt.want)
			}
		})
	}
}

// TestUsesAttribution: rules that need the audit stream are the ones with
// users, excludeUsers or a when reading actor's audit fields.
func TestUsesAttribution(t *testing.T) {
	tests := []struct {
		name, body string
		want       bool
	}{
		{"plain", "", false},
		{"users", "", true},
		{"excludeUsers", "", true},
		{"actor.manager", `    when: 'actor.manager == "kubectl"'` + "\n", false},
		{"actor.operation", `    when: 'actor.operation == "Apply" && object.spec.size > 1'` + "\n", false},
		{"actor.user", `    when: '!actor.user.username.startsWith("system:")'` + "\n", true},
		{"actor.match", `    when: 'actor.match == "exact"'` + "\n", true},
		{"actor index", `    when: 'actor["userAgent"] != ""'` + "\n", true},
		{"actor whole", `    when: 'size(actor) > 0'` + "\n", true},
		{"has actor.user", `    when: 'has(actor.user)'` + "\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := match
			switch tt.name {
			case "users":
				m = "    match: {resources: [{group: example.com, kind: Widget}], users: [alice]}\n"
			case "excludeUsers":
				m = "    match: {resources: [{group: example.com, kind: Widget}], excludeUsers: [alice]}\n"
			}
			set, err := Parse("f.yaml", []byte(rule(m+tt.body+logAction)))
			if err != nil {
				t.Fatal(err)
			}
			if got := set.Rule("r").UsesAttribution(); got != tt.want {
				t.Errorf("UsesAttribution = %v, want %v", got, tt.want)
			}
			if got := len(set.UsesAttribution()) == 1; got != tt.want {
				t.Errorf("Set.UsesAttribution = %v", set.UsesAttribution())
			}
		})
	}
}

// managedWidget is a Widget at resourceVersion rv whose managedFields
// name the managers mf, in order, each an Update.
func managedWidget(rv string, mf ...string) map[string]any {
	entries := []any{}
	for _, m := range mf {
		entries = append(entries, map[string]any{"manager": m, "operation": "Update", "time": "2026-01-01T00:00:0" + rv + "Z"})
	}
	return map[string]any{"metadata": map[string]any{"name": "w", "namespace": "ns", "uid": "u", "resourceVersion": rv, "managedFields": entries},
		"spec": map[string]any{"size": rv}}
}

// TestCELActor: every key of actor is there, also without attribution, so
// that expressions need no has().
func TestCELActor(t *testing.T) {
	obj := managedWidget
	attributed := &change.Attribution{Match: change.MatchWindow,
		User:             &change.UserInfo{Username: "admin", Groups: []string{"system:masters"}},
		ImpersonatedUser: &change.UserInfo{Username: "alice"},
		Verb:             "patch", UserAgent: "kubectl/v1.37", SourceIPs: []string{"10.0.0.1"}, AuditID: "id-1"}
	tests := []struct {
		name string
		when string
		a    *change.Attribution
		want bool
	}{
		{"user", `actor.user.username == "admin" && actor.user.groups == ["system:masters"]`, attributed, true},
		{"impersonated", `actor.impersonatedUser.username == "alice"`, attributed, true},
		{"request", `actor.verb == "patch" && actor.userAgent.startsWith("kubectl/") && actor.sourceIPs == ["10.0.0.1"] && actor.auditID == "id-1"`, attributed, true},
		{"match", `actor.match == "window" && actor.candidates == []`, attributed, true},
		{"manager", `actor.manager == "kubectl-patch" && actor.operation == "Update"`, attributed, true},
		{"no attribution: empty user", `actor.user.username == "" && actor.impersonatedUser.username == "" && actor.match == "none"`, nil, true},
		{"no attribution: human test", `!actor.user.username.startsWith("system:")`, nil, true},
		{"ambiguous", `actor.match == "ambiguous" && "bob" in actor.candidates && actor.user.username == ""`,
			&change.Attribution{Match: change.MatchAmbiguous, Candidates: []string{"alice", "bob"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("f.yaml", []byte(rule(match+"    when: '"+strings.ReplaceAll(tt.when, "'", "''")+"'\n"+logAction)))
			if err != nil {
				t.Fatal(err)
			}
			c := &Change{Type: change.Updated, Resource: widgetsV1, Old: obj("1", "kubectl-create"), New: obj("2", "kubectl-create", "kubectl-patch"),
				Time: time.Unix(0, 0), Attribution: tt.a}
			firings, errs := set.Eval(c)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got := len(firings) == 1; got != tt.want {
				t.Errorf("fired %v, want %v", got, tt.want)
			}
		})
	}
}

// TestActorPayload: the payload's actor has its keys in the documented
// order, absent ones left out, and is valid JSON.
func TestActorPayload(t *testing.T) {
	full := &change.Attribution{Match: change.MatchExact,
		User:             &change.UserInfo{Username: "admin", UID: "1", Groups: []string{"g"}},
		ImpersonatedUser: &change.UserInfo{Username: "al\"ice"},
		Verb:             "update", UserAgent: "ua", SourceIPs: []string{"::1", "10.0.0.1"}, AuditID: "x"}
	tests := []struct {
		name  string
		mf    bool
		a     *change.Attribution
		want  string
		empty bool
	}{
		{"nothing", false, nil, "", true},
		{"manager only", true, nil, `{"manager":"m","operation":"Update"}`, false},
		{"none", true, &change.Attribution{Match: change.MatchNone}, `{"manager":"m","operation":"Update","match":"none"}`, false},
		{"zero match is none", false, &change.Attribution{}, `{"match":"none"}`, false},
		{"full", true, full, `{"manager":"m","operation":"Update","user":{"username":"admin","uid":"1","groups":["g"]},"impersonatedUser":{"username":"al\"ice"},"verb":"update","userAgent":"ua","sourceIPs":["::1","10.0.0.1"],"auditID":"x","match":"exact"}`, false},
		{"ambiguous", false, &change.Attribution{Match: change.MatchAmbiguous, Verb: "delete", Candidates: []string{"a", "b"}}, `{"verb":"delete","match":"ambiguous","candidates":["a","b"]}`, false},
		{"admission", false, &change.Attribution{Match: change.MatchExact, Source: change.SourceAdmission, Verb: "patch",
			User: &change.UserInfo{Username: "system:serviceaccount:ci:deployer", Groups: []string{"system:serviceaccounts"},
				Extra: map[string][]string{"authentication.kubernetes.io/pod-name": {"runner-1"}, "authentication.kubernetes.io/credential-id": {"JTI=1"}}}},
			`{"user":{"username":"system:serviceaccount:ci:deployer","groups":["system:serviceaccounts"],"extra":{"authentication.kubernetes.io/credential-id":["JTI=1"],"authentication.kubernetes.io/pod-name":["runner-1"]}},"verb":"patch","source":"admission","match":"exact"}`, false},
		{"none from both sources", false, &change.Attribution{Match: change.MatchNone, Source: change.SourceBoth}, `{"source":"admission+audit","match":"none"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok := appendActor(nil, managerActor{Manager: "m", Operation: "Update"}, tt.mf, tt.a)
			if ok == tt.empty {
				t.Fatalf("ok %v", ok)
			}
			if tt.empty {
				if len(b) != 0 {
					t.Errorf("wrote %s", b)
				}
				return
			}
			got, found := strings.CutPrefix(string(b), `,"actor":`)
			if !found || got != tt.want {
				t.Errorf("got  %s\nwant %s", b, tt.want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(got), &v); err != nil {
				t.Errorf("not JSON: %v", err)
			}
		})
	}
}

// TestWriteSubresource: the subresource of an update, from the
// managedFields entries the write stamped.
func TestWriteSubresource(t *testing.T) {
	entry := func(manager, sub, time string) any {
		e := map[string]any{"manager": manager, "operation": "Update", "time": time, "fieldsHash": "h-" + manager}
		if sub != "" {
			e["subresource"] = sub
		}
		return e
	}
	obj := func(entries ...any) map[string]any {
		return map[string]any{"metadata": map[string]any{"managedFields": entries}}
	}
	base := []any{entry("kubectl", "", "T1"), entry("controller", "status", "T1")}
	tests := []struct {
		name     string
		old, new map[string]any
		typ      change.Type
		want     string
		ok       bool
	}{
		{"spec write", obj(base...), obj(entry("kubectl", "", "T2"), base[1]), change.Updated, "", true},
		{"status write", obj(base...), obj(base[0], entry("controller", "status", "T2")), change.Updated, "status", true},
		{"new scale entry", obj(base...), obj(append(base, entry("hpa", "scale", "T2"))...), change.Updated, "scale", true},
		{"nothing stamped", obj(base...), obj(base...), change.Updated, "", false},
		{"disagreeing entries", obj(), obj(base...), change.Updated, "", false},
		{"not an update", nil, obj(base...), change.Created, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, ok := WriteSubresource(&Change{Type: tt.typ, Old: tt.old, New: tt.new})
			if sub != tt.want || ok != tt.ok {
				t.Errorf("got %q %v, want %q %v", sub, ok, tt.want, tt.ok)
			}
		})
	}
}

// TestFiringFieldsArePayloads: a firing's Time, Type and actor names are
// what its payload says (the history records them without reading the
// payload back), with and without attribution, for each type of change.
func TestFiringFieldsArePayloads(t *testing.T) {
	obj := managedWidget
	set, err := Parse("f.yaml", []byte(rule(match+logAction)))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 12, 0, 0, 123456789, time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name     string
		typ      change.Type
		old, new map[string]any
		a        *change.Attribution
	}{
		{"updated, impersonated", change.Updated, obj("1", "kubectl-create"), obj("2", "kubectl-create", "kubectl-patch"),
			&change.Attribution{Match: change.MatchExact, User: &change.UserInfo{Username: "admin"}, ImpersonatedUser: &change.UserInfo{Username: "al\"ice"}}},
		{"created, no attribution", change.Created, nil, obj("1", "kubectl-create"), nil},
		{"deleted, ambiguous", change.Deleted, obj("3", "helm"), nil, &change.Attribution{Match: change.MatchAmbiguous, Candidates: []string{"a", "b"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			firings, errs := set.Eval(&Change{Type: tc.typ, Resource: widgetsV1, Old: tc.old, New: tc.new, Time: at, Attribution: tc.a})
			if len(errs) > 0 || len(firings) != 1 {
				t.Fatalf("%d firings, %v", len(firings), errs)
			}
			f := firings[0]
			var p payload.Payload
			if err := payload.Unmarshal(f.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if !f.Time.Equal(p.Time) || f.Time.Location() != time.UTC || f.Time.Nanosecond()%1000 != 0 {
				t.Errorf("Time %v, payload %v", f.Time, p.Time)
			}
			var a payload.Actor
			if p.Actor != nil {
				a = *p.Actor
			}
			username := func(u *change.UserInfo) string {
				if u == nil {
					return ""
				}
				return u.Username
			}
			if f.Type != p.Type || f.Manager != a.Manager || f.User != username(a.User) || f.Impersonated != username(a.ImpersonatedUser) {
				t.Errorf("firing type %q manager %q user %q impersonated %q; payload %s", f.Type, f.Manager, f.User, f.Impersonated, f.Payload)
			}
		})
	}
}
