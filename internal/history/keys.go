package history

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
)

// maxKeyFile bounds what a key file may hold.
const maxKeyFile = 64 << 10

// LoadSigningKey reads an Ed25519 private key from a PEM file of type
// PRIVATE KEY (PKCS #8, as `openssl genpkey -algorithm ed25519` writes
// it). Its errors name the file, never the key.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("signing key %s: not a PEM block of type PRIVATE KEY (make one with: openssl genpkey -algorithm ed25519)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: not a PKCS #8 private key", path)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("signing key %s: a %T, not an Ed25519 key", path, k)
	}
	return key, nil
}

// MarshalPrivateKey is key as LoadSigningKey reads it.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublicKey is pub as a PEM block of type PUBLIC KEY (PKIX), what
// `fieldwatch history pubkey` prints and `verify --pubkey` reads.
func MarshalPublicKey(pub ed25519.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub) // an Ed25519 key always marshals
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// LoadPublicKey reads an Ed25519 public key from a file: a PEM block of
// type PUBLIC KEY, or the key's 32 bytes in base64 on one line.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := readKeyFile(path)
	if err != nil {
		return nil, err
	}
	if block, _ := pem.Decode(b); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("public key %s: a PEM block of type %s, not PUBLIC KEY", path, block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key %s: %w", path, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key %s: a %T, not an Ed25519 key", path, k)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(b)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key %s: neither a PEM PUBLIC KEY nor %d bytes in base64", path, ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, errors.New("key file " + path + ": larger than a key")
	}
	return b, nil
}

// Signer signs checkpoints with an Ed25519 key.
type Signer struct {
	key     ed25519.PrivateKey
	cluster string
	body    []byte
}

// NewSigner returns a Signer of key for the cluster named cluster.
func NewSigner(key ed25519.PrivateKey, cluster string) *Signer {
	body, _ := json.Marshal(CheckpointBody{Cluster: cluster, Key: key.Public().(ed25519.PublicKey)})
	return &Signer{key: key, cluster: cluster, body: body}
}

// record is the checkpoint record to append.
// PublicKey returns the public key of the signing key.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

func (s *Signer) record() Record {
	return Record{Kind: LinkCheckpoint, Body: s.body, Sign: func(hash []byte) []byte {
		return ed25519.Sign(s.key, SignedMessage(hash))
	}}
}
