package change

// Type is what happened to an object: created, updated or deleted. It is
// the payload's "type".
type Type string

// The change types.
const (
	Created Type = "created"
	Updated Type = "updated"
	Deleted Type = "deleted"
)
