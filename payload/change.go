package payload

import "encoding/json"

// Op is the operation of a change, as RFC 6902 names it.
type Op string

// The operations a payload's changes use.
const (
	// OpAdd adds Value at Path; it has no OldValue.
	OpAdd Op = "add"
	// OpRemove removes the value at Path, which was OldValue; it has no
	// Value.
	OpRemove Op = "remove"
	// OpReplace replaces OldValue at Path with Value.
	OpReplace Op = "replace"
)

// Change is one change of an object: an RFC 6902 operation with the value
// it replaced or removed beside it. Applied in order to the old object, a
// payload's changes give the new one, except for what the rule leaves out
// (docs/payload.md, Changes).
type Change struct {
	// Op is add, remove or replace.
	Op Op `json:"op"`
	// Path is an RFC 6901 JSON Pointer into the object ("~" is written
	// "~0" and "/" "~1"), such as /metadata/annotations/example.com~1x.
	Path string `json:"path"`
	// Value is the new value, as JSON; absent (nil) for a remove. A value
	// set to null is the JSON null, not nil.
	Value json.RawMessage `json:"value,omitempty"`
	// OldValue is the value replaced or removed, as JSON; absent (nil) for
	// an add.
	OldValue json.RawMessage `json:"oldValue,omitempty"`
}
