package rules

import (
	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/crd/diff"
	"github.com/fieldwatch/fieldwatch/fileerr"
)

// Rule is one compiled rule of a rules file. Its exported fields are what
// the user wrote (and what actions need); the rest is the compiled form
// Eval runs. A Rule is immutable after loading and safe for concurrent
// use.
type Rule struct {
	// Name is the rule's unique name.
	Name string
	// Description is the rule's optional description.
	Description string
	// Source is where the rule is defined: FILE:LINE:COL.
	Source string
	// Selectors are the rule's match.resources (with match.custom).
	Selectors []change.Selector
	// On are the change types the rule fires on (default all three).
	On []change.Type
	// IncludeObject puts object and oldObject into the payload.
	IncludeObject bool
	// Actions are run, each with the same payload, when the rule fires.
	Actions []Action
	// States makes the history keep every state of the objects the rule
	// selects (history: {states: true}; Set.State).
	States bool

	on        uint8 // bit set of changeBit
	filter    objectFilter
	users     userFilter
	fields    []*fieldTrigger
	ignore    []*fieldPath
	ignoreKey string // the ignore paths, canonical: rules with the same share diffs
	redact    []*fieldPath
	noise     [][]string // noise locations this rule leaves out
	noiseTree *locTree   // noise as a tree, shared (read only) by the changes without ignoreFields
	when      *celExpr
	// routeAudit is true when an action's when reads who made the change
	// from the audit stream (user, or actor's audit fields).
	routeAudit bool
	crd        crdMode
	// crdPolicy is the crd block's policy (nil: the default).
	crdPolicy  *diff.Policy
	projection change.Projection
	nameErr    fileerr.Error // where the name is, for duplicate-name errors
	// where holds where the rule's match and its entries were written,
	// for the errors of checks made after loading (CheckNamespaced).
	where matchPositions
}

// UsesAttribution reports whether r needs to know who made a change from
// the audit stream: its match has users or excludeUsers, or its when
// expression reads the actor's audit fields (anything of actor but
// manager and operation). fieldwatch run refuses such rules without an
// audit source.
func (r *Rule) UsesAttribution() bool {
	return r.users.set() || (r.when != nil && r.when.actorAudit) || r.routeAudit
}

// Matches reports whether r watches res: one of its selectors matches.
func (r *Rule) Matches(res change.Resource) bool {
	for _, s := range r.Selectors {
		if s.Matches(res) {
			return true
		}
	}
	return false
}

// crdMode says what a rule gets of the comparison of a CRD change.
type crdMode uint8

const (
	// crdNone: nothing (the rule has no crd key and its when does not
	// read crd).
	crdNone crdMode = iota
	// crdCompare: the comparison, in the payload and in CEL.
	crdCompare
	// crdImpact: the comparison with the impact of its breaking checks.
	crdImpact
)

func changeBit(t change.Type) uint8 {
	switch t {
	case change.Created:
		return 1
	case change.Updated:
		return 2
	case change.Deleted:
		return 4
	}
	return 0
}

// noisePaths are left out of every change (docs/payload.md, "Changes"): they
// change on every write without saying anything about the object. A rule
// that lists one of them (or a path below it) in fields still sees it.
var noisePaths = [][]string{
	{"metadata", "resourceVersion"},
	{"metadata", "managedFields"},
	{"metadata", "generation"},
}

// noisePruner leaves noisePaths out of a diff. A pruner is only read
// once made, so one serves every change.
var noisePruner = newPruner(noisePaths)
