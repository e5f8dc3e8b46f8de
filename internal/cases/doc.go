// Package cases runs offline test cases against rules: `fieldwatch test`. A
// cases file lists changes (old and new objects) and what must happen to
// each: which rules fire, with which changes, with which evaluation errors.
//
//	set, err := rules.Load("rules.yaml")
//	cs, err := cases.Load("cases.yaml", time.Now())
//	for _, r := range cases.Run(set, cs) {
//		fmt.Println(r.Name, r.Pass, r.Diff)
//	}
//
// RunMetrics also computes the series of the metrics from fields
// (package fieldmetrics) each case's objects give, checked against
// expect.series and expect.oldSeries.
//
// Run reports each case as passed or failed, with a line diff (LineDiff) of
// what differs and the payloads of what fired.
//
// A cases file is a YAML mapping with one key, cases (docs/rules.md,
// "Offline cases", documents it for users):
//
//	cases:
//	  - name: resize fires                  # required, unique
//	    type: updated                       # created, updated or deleted
//	    time: "2026-12-02T12:00:00Z"        # optional; default: the time Load is given
//	    resource: {resource: widgets, custom: true}
//	      # group, version and kind default to the object's apiVersion and
//	      # kind, namespaced to whether it has a namespace
//	    oldObject: {...}                    # inline YAML objects; anchors help
//	    object: {...}
//	    actor:                              # optional: who made it, as the audit stream tells
//	      user: {username: alice, groups: [dev]}
//	      verb: patch                       # and impersonatedUser, userAgent, sourceIPs, auditID
//	      match: exact                      # default exact with a user, none without;
//	                                        # ambiguous with candidates: [alice, bob]
//	    expect:
//	      fire: [widget-resized]            # required; [] when nothing fires
//	      changes:                          # optional, exact, per rule
//	        widget-resized:
//	          - {op: replace, path: /spec/size, value: 2, oldValue: 1}
//	      errors: ["no such key"]           # optional: expected evaluation errors
//	      crd: {rule: {breaking: 1}}        # optional: keys of the payload's crd
//	    objects: [...]                      # custom resources, for the impact
//	                                        # of a CRD update (crd: {impact: true})
//
// For a case with objects, Run compares the two CRDs and scans the objects
// (package crd/impact) for the rules that ask for the impact, as
// `fieldwatch run` does with its cache.
//
// cases uses package rules only through its exported API; like rules it
// must not import k8s.io/client-go.
package cases
