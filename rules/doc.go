// Package rules loads fieldwatch's YAML rules files, compiles them once and
// evaluates changes against them: which rules fire on a change of an object,
// and the JSON payload each firing carries (DESIGN.md, "Rules file" and
// "Payload").
//
// rules works on plain map[string]any objects so that it can be tested with
// JSON fixtures alone: it must not import k8s.io/client-go (directly or
// not), nor the watcher or action packages. It uses package change (the
// vocabulary it shares with the watcher: resources, selectors, projections,
// change types), gopkg.in/yaml.v3, github.com/google/cel-go and
// k8s.io/apimachinery/pkg/labels.
//
// # Using it
//
// Compile turns rules written as plain structs (File, RuleSpec and the
// action specs, with yaml and json tags) into a Set; every error comes back
// together, each with its field path:
//
//	rules[2].fields[0].path: message
//
// Load (or Parse) reads rules files (YAML, decoded strictly by
// internal/yamlstrict: unknown keys are errors) and compiles them, every
// error of every file placed where it was written, one per line:
//
//	FILE:LINE:COL: rules[2].fields[0].path: message
//
// A file with any error gives no Set (a running Set is never replaced by a
// broken one). Validate is Load for `fieldwatch validate`.
// Set.Selectors tells the watcher which resources to watch and
// Set.Projection which parts of their objects to cache; Set.Eval turns
// each observed Change into Firings (payload and actions) plus evaluation
// errors to log. Package rules/cases runs offline cases for `fieldwatch
// test`.
//
// # Rules file
//
// A rules file is a YAML mapping with one key, rules, a list of rules.
// Unknown keys anywhere are errors. YAML anchors, aliases and merge keys
// (<<: *base) work.
//
//	rules:
//	  - name: widget-resized        # required, unique across all files; letters,
//	                                # digits, '.', '_', '-' (it is part of the payload id)
//	    description: text           # optional
//	    match:                      # required
//	      resources:                # one or more selectors
//	        - group: example.com    # required: "" is the core group, "*" any group
//	          kind: Widget          # kind and/or resource (plural): at least one;
//	          resource: widgets     #   "*" matches any
//	          version: v1           # optional; "" (default) = the preferred
//	                                #   version, "*" = every served version
//	      custom: true              # only CRD-backed resources
//	      namespaces: [default]     # optional; empty = all (cluster-scoped
//	      excludeNamespaces: [kube-system]  #   objects have namespace "")
//	      labelSelector: "app=shop,tier in (web)"  # Kubernetes label selector syntax
//	      names: ["web-*"]          # optional globs (path.Match: *, ?, [a-z])
//	    on: [create, update, delete]   # default: all three
//	    fields:                     # optional triggers, see below
//	      - path: spec.size
//	        from: 1
//	        to: 2
//	      - spec.color              # shorthand for {path: spec.color}
//	    ignoreFields: [status]      # paths whose changes never count nor show
//	    when: "object.spec.size > oldObject.spec.size"   # optional CEL
//	    includeObject: false        # add object and oldObject to the payload
//	    redact: [spec.password]     # more paths whose values become "<redacted>"
//	    actions: [...]              # one or more, see below
//
// The key on is a boolean in YAML 1.1 parsers (yaml.v2, sigs.k8s.io/yaml);
// this package reads YAML 1.2 with yaml.v3, so the unquoted `on:` is the
// string key "on".
//
// Matching: a rule watches a resource when one of its selectors matches
// it (Rule.Matches); an object of that resource then also has to pass
// namespaces, excludeNamespaces, names and labelSelector. The label
// selector is checked against the new object on create, the old one on
// delete, and either on update (so a rule for app=shop sees the label
// being removed). A selector version "" matches the preferred version only
// (change.Resource.Preferred), so that a resource another rule watches at
// every version does not fire it twice. change.Selector has the matching
// rules.
//
// # Field paths
//
// fields, ignoreFields and redact use dotted paths:
//
//	spec.size                              map keys separated by dots
//	metadata.annotations["example.com/x"]  a quoted key, for keys with dots, slashes,
//	metadata.labels['app.kubernetes.io/name']  brackets or spaces ("double" quotes
//	                                       take Go escapes, 'single' quotes none)
//	spec.containers[0].image               a list item by index
//	spec.containers[*].image               every item of a list (or every value of
//	                                       a map, in key order)
//	spec.containers[name=web].image        the first list item whose name is "web"
//	spec.ports[port=80]                    unquoted values also match numbers and
//	                                       booleans by their text (80, true)
//	spec.ports[name="80"]                  quoted values match strings only
//
// A path starts with a field name. Paths are compiled once at load.
//
// # Triggers
//
// Without fields, a rule fires on every create and delete it matches, and
// on every update that changed anything but noise (see Changes) and its
// ignoreFields.
//
// With fields, a rule fires when one of its fields fires. On update a
// field fires when the value at its path changed (deep, typed equality:
// numbers compare by value whatever their Go type, so YAML 1, JSON 1 and
// int64(1) are equal, but 1 and "1" differ; a value appearing or vanishing
// is a change; a [*] path's value is the list of everything it selects, in
// order) and every condition it has holds:
//
//	from: V       the old value equals V (from: null: it was null or absent)
//	to: V         the new value equals V (to: null: it is null or absent)
//	added: true   the path was absent and is present
//	removed: true the path was present and is absent
//
// On create a field fires when its path is present in the new object (and
// equals to, if set); fields with from or removed never fire on create.
// On delete a field fires when its path is present in the final state (and
// equals from, if set); fields with to or added never fire on delete.
// Contradictions (added with removed, added with from, removed with to,
// from equal to to) are load errors.
//
// After the triggers, when (if any) must be true, and an update must still
// have changes once noise and ignoreFields are left out.
//
// # CEL (when)
//
// when is a CEL expression (github.com/google/cel-go v0.29.2, the version
// Kubernetes uses) over two variables, object and oldObject: the new and
// old states as dynamic maps; oldObject is null for a create and object is
// null for a delete. Numbers compare across int and double, optional
// syntax works (object.?spec.size.orValue(0)), and the strings, sets and
// lists extensions are there, as are sum(), min() and max() of a list of
// numbers, as in Kubernetes' CEL list library:
//
//	object.status.images.map(i, i.sizeBytes).sum() >= 50000000000
//	[1, 3].sum() == 4    [1.0, 3.0].sum() == 4.0    [].sum() == 0
//	[1, 3].min() == 1    [1, 3].max() == 3          [].min(): error
//
// A list of ints gives an int, of doubles a double (of uints a uint); the
// sum of an empty list is 0; min and max of an empty list are errors, and
// so are integer overflow and, at runtime, a list of mixed number types
// ([1, 2.5]; a JSON 2.0 arrives as a double, so map such values through
// double() first) or of anything but numbers.
//
// The expression is compiled and type-checked at load and must return a
// bool. At runtime a missing key is an error (guard with
// has(object.spec.size)); an error, or a run over CostLimit, means the
// rule does not fire and is returned by Eval as an error to log.
// Expressions that loop (all, exists, map, filter, ...) or call functions
// that may cost more than linear time run metered against CostLimit;
// simple ones (comparisons, has, size, string tests, sum, min, max) run
// unmetered, their cost bounded by the object's size. When metered, sum,
// min and max cost one unit per item of their list.
//
// # Changes
//
// A payload's changes are RFC 6902 operations (add, remove, replace) with
// JSON Pointer paths (RFC 6901: "~" is written "~0", "/" is "~1") and the
// replaced or removed value as oldValue:
//
//	{"op": "replace", "path": "/spec/size", "value": 2, "oldValue": 1}
//
// Maps are compared key by key, in key order. Lists of equal length are
// compared item by item; a list that grew only at its end gives one add per
// new item, one that shrank only at its end one remove per item (last
// first, so the operations apply in order); any other list change is one
// replace of the whole list.
//
// Noise is left out: metadata.resourceVersion, metadata.managedFields and
// metadata.generation (so a resync, or an update that only moved those,
// fires nothing). A rule that names one of them (or a path below it) in
// fields sees it. ignoreFields are left out too; when a change's value
// contains an ignored map key (the whole spec added, say), the key is
// removed from the value, and so are the maps that held nothing else
// (list items are never removed from a value: an item that held only
// ignored keys shows as {}). A map key whose value holds only ignored
// keys is as good as absent: its appearing or vanishing is no change
// (the first last-applied annotation, in annotations that did not exist
// before, fires nothing when the annotation is ignored), a value replaced
// by such a map is a remove and the reverse an add. A map that was empty
// to begin with is a value like any other. When a list changes length,
// items that differ only in ignored parts count as unchanged.
//
// For a rule with fields, an update's changes are those at, under or
// above the locations its fields select in the old or the new object; a
// change above (such as a whole list replaced) is kept whole.
//
// Created and deleted: a rule without fields has empty changes (the
// payload's object or oldObject, with includeObject, holds the state); a
// rule with fields has one add (created) or remove (deleted, with
// oldValue) per location its fields select in the object.
//
// # Payload
//
// Each firing's payload is one JSON object with the keys, in this order,
// of DESIGN.md "Payload": id ("<uid>/<resourceVersion>/<rule>": stable for
// the same change; "<uid>/deleted/<rule>" for a deletion, whose last known
// resourceVersion may be that of the update before it), time (RFC 3339 in UTC with microseconds), rule, type
// (created, updated, deleted), resource {group, version, resource, kind},
// namespace ("" for cluster-scoped objects), name, uid, resourceVersion
// (of the final state for a delete), changes, actor, and with includeObject
// object and oldObject (each only when there is one).
//
// actor is {manager, operation} of an entry of the new object's
// metadata.managedFields. The apiserver keeps those entries sorted by
// operation, then time (in seconds), then manager, not by recency, and a
// write may leave no entry at all (a /scale write, say), so:
//
//   - created: the entry with the newest time (on a tie, the last in the
//     list);
//   - updated: only the entries the write touched are candidates: those
//     the old object lacks (an entry is known by its manager, operation
//     and subresource) and those whose time, fieldsHash or fieldsV1
//     changed. Of the candidates, the one whose fieldsV1 owns the most of
//     the rule's changed paths wins; when none owns any (the watcher keeps
//     only a hash of each fieldsV1, and removals are owned by nobody
//     afterwards), the newest (on a tie, the last). With no candidate
//     there is no actor: a previous writer is not guessed;
//   - deleted: no actor (managedFields says who wrote the object, not who
//     deleted it).
//
// Entries without a manager are skipped; with none left there is no actor.
//
// Values at redact paths are replaced by "<redacted>" everywhere in the
// payload (object, oldObject, change values and oldValues). In Secrets
// (core group, resource secrets) the values of data and stringData are
// always redacted (their keys stay visible), and so is the
// kubectl.kubernetes.io/last-applied-configuration annotation, in which a
// client-side `kubectl apply` keeps the whole Secret it applied
// (stringData in plain text): wherever it shows, in a change of the
// annotation, of the annotations or of the whole metadata, its value is
// "<redacted>". Payload building never changes the input objects:
// redaction copies what it rewrites.
//
// # Actions
//
// Each entry of actions has exactly one of these keys (durations are
// strings such as 5s or 1m30s; none may be negative):
//
//	log: {file: /var/log/fieldwatch.jsonl}      # file optional: stdout
//	webhook:
//	  url: https://hooks.example.com/x          # required, absolute http(s)
//	  timeout: 5s                               # default 10s
//	  headers: {X-Team: shop}
//	  bearerTokenFile: /var/run/secrets/token
//	  caFile: ca.pem
//	  certFile: client.pem                      # certFile and keyFile: both or neither
//	  keyFile: client-key.pem
//	  signing: {secretFile: /etc/hmac, header: X-Fieldwatch-Signature}  # or secretEnv; exactly one
//	  retry: {attempts: 8, initialBackoff: 500ms, maxBackoff: 1m}
//	  template: '{"text": {{json .rule}}}'      # Go text/template; must render JSON
//	exec:
//	  command: [/usr/local/bin/notify, --json]  # required; payload on stdin, no shell
//	  env: {MODE: audit}
//	  timeout: 30s
//	  retry: {...}
//	event:
//	  reason: WidgetResized                     # required
//	  type: Normal                              # Normal (default) or Warning
//	  note: "{{.rule}}: {{.name}}"              # template over the payload
//	  retry: {...}
//	patch:
//	  merge: {metadata: {annotations: {audited: "yes"}}}   # exactly one of merge
//	  json: [{op: add, path: /metadata/labels/x, value: y}] #   and json (RFC 6902)
//	  subresource: status                       # optional: "" or status
//	  retry: {...}
//
// `- log:` with nothing after it is `- log: {}`.
//
// # Projection
//
// Set.Projection tells the watcher which parts of a resource's objects the
// rules read; see change.Projection for what the watcher keeps anyway.
//
// # Offline cases
//
// Package rules/cases reads cases files (changes and what must fire) and
// runs them against a Set: `fieldwatch test`.
package rules
