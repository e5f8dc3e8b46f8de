package action

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TimestampHeader carries the Unix time (seconds) at which a webhook
// request was signed.
const TimestampHeader = "X-Fieldwatch-Timestamp"

// signaturePrefix names the algorithm in the signature header's value.
const signaturePrefix = "sha256="

// Errors of VerifySignature.
var (
	// ErrBadSignature means the signature does not match the body,
	// timestamp and secret (or is malformed).
	ErrBadSignature = errors.New("webhook signature does not match")
	// ErrStaleTimestamp means the timestamp is malformed or further from
	// now than the allowed skew: possibly a replayed request.
	ErrStaleTimestamp = errors.New("webhook timestamp outside the allowed skew")
)

// Sign returns the signature header value of a webhook request:
//
//	sha256=<lowercase hex of HMAC-SHA256(secret, timestamp + "." + body)>
//
// where timestamp is the value of the X-Fieldwatch-Timestamp header (Unix
// seconds, decimal) and body the exact request body bytes.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return signaturePrefix + hex.EncodeToString(mac.Sum(nil))
}

// VerifySignature checks a signed fieldwatch webhook request, for Go
// receivers: timestamp is the X-Fieldwatch-Timestamp header, signature the
// signature header (X-Fieldwatch-Signature unless the rule renames it),
// body the raw request body as received. It returns nil when signature is
// Sign(secret, timestamp, body) and the timestamp is within maxSkew of now;
// ErrStaleTimestamp or ErrBadSignature (wrapped) otherwise. A maxSkew of 0
// or less skips the timestamp check, which leaves the receiver open to
// replayed requests; 5 minutes is a usual bound. The comparison takes
// constant time.
//
// A receiver should also drop duplicates by the Idempotency-Key header
// (the payload's id): fieldwatch delivers at least once.
func VerifySignature(secret []byte, timestamp, signature string, body []byte, maxSkew time.Duration, now time.Time) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || strings.TrimSpace(timestamp) != timestamp || ts < 0 {
		return fmt.Errorf("%w: bad timestamp %q", ErrStaleTimestamp, timestamp)
	}
	if maxSkew > 0 {
		skew := now.Sub(time.Unix(ts, 0))
		if skew > maxSkew || skew < -maxSkew {
			return fmt.Errorf("%w: signed at %s, %s from now", ErrStaleTimestamp, time.Unix(ts, 0).UTC().Format(time.RFC3339), skew.Round(time.Second))
		}
	}
	got, ok := strings.CutPrefix(strings.TrimSpace(signature), signaturePrefix)
	if !ok {
		return fmt.Errorf("%w: no %q prefix", ErrBadSignature, signaturePrefix)
	}
	gotMAC, err := hex.DecodeString(got)
	if err != nil {
		return fmt.Errorf("%w: not hex", ErrBadSignature)
	}
	want, _ := hex.DecodeString(strings.TrimPrefix(Sign(secret, timestamp, body), signaturePrefix))
	if !hmac.Equal(gotMAC, want) {
		return ErrBadSignature
	}
	return nil
}
