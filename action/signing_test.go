package action

import (
	"errors"
	"testing"
	"time"
)

// TestSignVector pins the scheme with a vector a receiver in any language
// can check:
//
//	printf '%s' '1700000000.{"id":"x"}' | openssl dgst -sha256 -hmac secret
func TestSignVector(t *testing.T) {
	got := Sign([]byte("secret"), "1700000000", []byte(`{"id":"x"}`))
	const want = "sha256=2f7852138f9dbd8d61c07c2cfb0b8ac96a46a32d78d4527788fb42fcb409a493"
	if got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestVerifySignature(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"id":"u/1/r","rule":"r"}`)
	now := time.Unix(1_800_000_000, 0)
	ts := "1800000000"
	sig := Sign(secret, ts, body)
	cases := []struct {
		name    string
		secret  []byte
		ts, sig string
		body    []byte
		skew    time.Duration
		now     time.Time
		want    error
	}{
		{"valid", secret, ts, sig, body, 5 * time.Minute, now, nil},
		{"valid within skew", secret, ts, sig, body, 5 * time.Minute, now.Add(4 * time.Minute), nil},
		{"valid, clock behind", secret, ts, sig, body, 5 * time.Minute, now.Add(-4 * time.Minute), nil},
		{"stale", secret, ts, sig, body, 5 * time.Minute, now.Add(6 * time.Minute), ErrStaleTimestamp},
		{"from the future", secret, ts, sig, body, 5 * time.Minute, now.Add(-6 * time.Minute), ErrStaleTimestamp},
		{"skew check off", secret, ts, sig, body, 0, now.Add(24 * time.Hour), nil},
		{"wrong secret", []byte("other"), ts, sig, body, time.Minute, now, ErrBadSignature},
		{"body changed", secret, ts, sig, []byte(`{"id":"u/1/r","rule":"s"}`), time.Minute, now, ErrBadSignature},
		{"timestamp changed", secret, "1800000001", sig, body, time.Minute, now, ErrBadSignature},
		{"no prefix", secret, ts, sig[len("sha256="):], body, time.Minute, now, ErrBadSignature},
		{"not hex", secret, ts, "sha256=zz", body, time.Minute, now, ErrBadSignature},
		{"empty signature", secret, ts, "", body, time.Minute, now, ErrBadSignature},
		{"bad timestamp", secret, "soon", sig, body, time.Minute, now, ErrStaleTimestamp},
		{"empty timestamp", secret, "", sig, body, time.Minute, now, ErrStaleTimestamp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifySignature(tc.secret, tc.ts, tc.sig, tc.body, tc.skew, tc.now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("VerifySignature = %v, want %v", err, tc.want)
			}
		})
	}
}

func FuzzVerifySignature(f *testing.F) {
	f.Add([]byte("k"), "1700000000", "sha256=00", []byte("{}"))
	f.Fuzz(func(t *testing.T, secret []byte, ts, sig string, body []byte) {
		_ = VerifySignature(secret, ts, sig, body, time.Minute, time.Unix(1700000000, 0))
		good := Sign(secret, ts, body)
		if err := VerifySignature(secret, ts, good, body, 0, time.Time{}); err != nil && !errors.Is(err, ErrStaleTimestamp) {
			t.Fatalf("own signature rejected: %v", err)
		}
	})
}
