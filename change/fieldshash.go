package change

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// FieldsHash digests a managedFields entry's field set (its fieldsV1, as
// decoded JSON): the first 16 hex digits of the SHA-256 of its JSON
// encoding (map keys sorted). The watcher's cache keeps this in place of
// the field set, as the entry's "fieldsHash"; the rules compare it with a
// field set to tell whether a writer's fields changed. "" when fields
// cannot be encoded.
func FieldsHash(fields any) string {
	b, err := json.Marshal(fields)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
