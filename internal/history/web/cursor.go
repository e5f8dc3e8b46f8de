package web

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fieldwatch/fieldwatch/internal/history"
)

// cursors seal the cursors the API hands out: AES-GCM under a key made
// when the server starts. A cursor is where a page stopped, which may be
// the place of an entry the caller may not read: sealed, it tells
// nothing of it, and a cursor this server did not write is refused.
type cursors struct{ aead cipher.AEAD }

func newCursors() (*cursors, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &cursors{aead: aead}, nil
}

// seal returns c as the API writes it.
func (cs *cursors) seal(c history.Cursor) string {
	var plain [16]byte
	binary.BigEndian.PutUint64(plain[:8], uint64(c.Time))
	binary.BigEndian.PutUint64(plain[8:], uint64(c.Seq))
	nonce := make([]byte, cs.aead.NonceSize(), cs.aead.NonceSize()+len(plain)+cs.aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read does not fail
	return base64.RawURLEncoding.EncodeToString(cs.aead.Seal(nonce, nonce, plain[:], nil))
}

// errCursor is the error of a cursor this server did not write.
var errCursor = errors.New(`not a cursor this server returned: use the "next" of the previous page (cursors do not outlive a restart, nor pass from one replica to another)`)

// open returns the cursor s seals.
func (cs *cursors) open(s string) (history.Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	n := cs.aead.NonceSize()
	if err != nil || len(raw) < n {
		return history.Cursor{}, fmt.Errorf("cursor: %w", errCursor)
	}
	plain, err := cs.aead.Open(nil, raw[:n], raw[n:], nil)
	if err != nil || len(plain) != 16 {
		return history.Cursor{}, fmt.Errorf("cursor: %w", errCursor)
	}
	return history.Cursor{Time: int64(binary.BigEndian.Uint64(plain[:8])), Seq: int64(binary.BigEndian.Uint64(plain[8:]))}, nil
}
