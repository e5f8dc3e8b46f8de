package change_test

import (
	"fmt"

	"github.com/fieldwatch/fieldwatch/change"
)

// A Selector picks resources as discovery lists them. A wildcard never
// covers core Secrets: a rule must name them.
func ExampleSelector_Matches() {
	configMaps := change.Resource{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, Preferred: true}
	secrets := change.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true, Preferred: true}
	everything := change.Selector{Group: "*", Kind: "*"}
	fmt.Println(everything.Matches(configMaps), everything.Matches(secrets))
	fmt.Println(change.Selector{Kind: "Secret"}.Matches(secrets))
	// Output:
	// true false
	// true
}

// Projections of several rules merge into what the watcher caches: a path
// below another is covered by it.
func ExampleProjection_Union() {
	a := change.Projection{Paths: [][]string{{"spec", "size"}}}
	b := change.Projection{Paths: [][]string{{"spec"}, {"metadata", "annotations"}}}
	fmt.Println(a.Union(b).Minimal().Paths)
	fmt.Println(a.Union(change.Projection{Full: true}).Full)
	// Output:
	// [[metadata annotations] [spec]]
	// true
}

// An Attribution names the user behind a change, or says why it cannot.
func ExampleAttribution_Username() {
	alice := change.Attribution{Match: change.MatchWindow, User: &change.UserInfo{Username: "alice"}}
	asBob := change.Attribution{Match: change.MatchExact, User: &change.UserInfo{Username: "admin"},
		ImpersonatedUser: &change.UserInfo{Username: "bob"}}
	unsure := change.Attribution{Match: change.MatchAmbiguous, Candidates: []string{"alice", "bob"}}
	for _, a := range []change.Attribution{alice, asBob, unsure} {
		fmt.Printf("%s %q %v\n", a.Match, a.Username(), a.Match.Attributed())
	}
	// Output:
	// window "alice" true
	// exact "bob" true
	// ambiguous "" false
}
