package history

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// newKey returns a new signing key.
func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func publicOf(key ed25519.PrivateKey) ed25519.PublicKey { return key.Public().(ed25519.PublicKey) }

// recordRounds records n entries in rounds of round, each written
// before the next is recorded, then closes r.
func recordRounds(t *testing.T, r *Recorder, from, n, round int) {
	t.Helper()
	for k := from; k < from+n; k += round {
		for _, e := range batch(t, k, min(round, from+n-k)) {
			r.RecordEntry(e)
		}
		want := float64(k + min(round, from+n-k) - from)
		testenv.Eventually(t, 10*time.Second, "entries written", func() bool { return testutil.ToFloat64(r.m.written) >= want })
	}
}

// TestCheckpoints: a recorder with a key seals its chain after every
// CheckpointEvery links and when it is closed; the checkpoints verify
// with the key's public key, name the cluster, and fail with another
// key.
func TestCheckpoints(t *testing.T) {
	trailStores(t, func(t *testing.T, ts *trailStore) {
		key := newKey(t)
		s := ts.open(t, "", false)
		r := NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond,
			Signer: NewSigner(key, "prod-eu"), CheckpointEvery: 10})
		recordRounds(t, r, 0, 45, 1) // one entry a write: a checkpoint after the 10th, 20th, 30th, 40th
		if got := testutil.ToFloat64(r.m.trail.WithLabelValues("checkpoint", "written")); got != 4 {
			t.Errorf("%v checkpoints written, want 4", got)
		}
		r.Close(context.Background()) // and one at close, for the last 5
		if got := testutil.ToFloat64(r.m.trail.WithLabelValues("checkpoint", "written")); got != 5 {
			t.Errorf("%v checkpoints written, want 5", got)
		}
		rep := verifyTrail(t, s, VerifyOptions{Key: publicOf(key), Now: time.Now()})
		if !rep.Intact() || len(rep.Chains) != 1 {
			t.Fatalf("report %+v: want one intact chain", rep)
		}
		c := rep.Chains[0]
		if c.Checkpoints != 5 || c.Sealed != c.Links || c.Entries != 45 {
			t.Errorf("chain %+v: want 45 entries, 5 checkpoints, the last link the last checkpoint", c)
		}
		var cluster string
		err := s.(Trail).Links(context.Background(), func(l *Link, _ *Entry) error {
			if l.Kind == LinkCheckpoint {
				cluster = string(l.Body)
			}
			return nil
		})
		if err != nil || cluster != `{"cluster":"prod-eu","key":"`+base64.StdEncoding.EncodeToString(publicOf(key))+`"}` {
			t.Errorf("checkpoint body %s, %v", cluster, err)
		}
		other := verifyTrail(t, s, VerifyOptions{Key: publicOf(newKey(t)), Now: time.Now()})
		if len(other.Problems) != 5 || other.Problems[0].Kind != BadSignature {
			t.Errorf("verified with another key: %+v, want 5 bad signatures", other.Problems)
		}
	})
}

// TestCheckpointInterval: links not yet sealed are sealed once
// CheckpointInterval has passed, without more writes.
func TestCheckpointInterval(t *testing.T) {
	s := openSQLite(t)
	key := newKey(t)
	r := NewRecorder(RecorderOptions{Store: s, Registerer: prometheus.NewRegistry(), FlushInterval: time.Millisecond,
		Signer: NewSigner(key, ""), CheckpointInterval: 50 * time.Millisecond})
	defer r.Close(context.Background())
	recordRounds(t, r, 0, 3, 3)
	testenv.Eventually(t, 10*time.Second, "a checkpoint", func() bool {
		return testutil.ToFloat64(r.m.trail.WithLabelValues("checkpoint", "written")) == 1
	})
	if rep := verifyTrail(t, s, VerifyOptions{Key: publicOf(key), Now: time.Now()}); !rep.Intact() || rep.Chains[0].Sealed != rep.Chains[0].Links {
		t.Errorf("report %+v: want every link sealed", rep)
	}
}

// TestSigningKeyFiles: a key written as LoadSigningKey reads it loads,
// and its public key round-trips through MarshalPublicKey; a file that
// is no key is an error naming it.
func TestSigningKeyFiles(t *testing.T) {
	dir := t.TempDir()
	key := newKey(t)
	pemKey, err := MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, pubFile, bad := filepath.Join(dir, "key.pem"), filepath.Join(dir, "pub.pem"), filepath.Join(dir, "bad")
	for f, b := range map[string][]byte{keyFile: pemKey, pubFile: MarshalPublicKey(publicOf(key)), bad: []byte("not a key\n")} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := LoadSigningKey(keyFile)
	if err != nil || !got.Equal(key) {
		t.Fatalf("LoadSigningKey = %v", err)
	}
	pub, err := LoadPublicKey(pubFile)
	if err != nil || !pub.Equal(publicOf(key)) {
		t.Fatalf("LoadPublicKey = %v", err)
	}
	for _, load := range []func(string) error{
		func(p string) error { _, err := LoadSigningKey(p); return err },
		func(p string) error { _, err := LoadPublicKey(p); return err },
	} {
		if err := load(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("a file that is no key: %v, want an error naming it", err)
		}
	}
	if _, err := LoadSigningKey(pubFile); err == nil {
		t.Error("a public key loads as a signing key")
	}
}
