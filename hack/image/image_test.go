package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func testSpec() spec {
	return spec{
		binary:     []byte("#!not really a program\n"),
		path:       "/fieldwatch",
		tags:       []string{"fieldwatch.local/fieldwatch:v1.2.3", "fieldwatch.local/fieldwatch:e2e"},
		user:       "65532:65532",
		entrypoint: []string{"/fieldwatch"},
		cmd:        []string{"run", "--rules", "/etc/fieldwatch/rules.yaml"},
		labels:     map[string]string{"org.opencontainers.image.version": "v1.2.3", "org.opencontainers.image.source": "https://github.com/fieldwatch/fieldwatch"},
		created:    time.Unix(1767225600, 0).UTC(),
		platform:   v1.Platform{OS: "linux", Architecture: "amd64"},
	}
}

func writeImage(t *testing.T, s spec) (v1.Image, []byte) {
	t.Helper()
	img, err := build(s)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := write(&buf, img, s.tags, s.created); err != nil {
		t.Fatal(err)
	}
	return img, buf.Bytes()
}

// TestReproducible: the same input gives the same bytes, so the same
// commit gives the same digest; another binary gives another.
func TestReproducible(t *testing.T) {
	img1, tar1 := writeImage(t, testSpec())
	img2, tar2 := writeImage(t, testSpec())
	d1, _ := img1.Digest()
	d2, _ := img2.Digest()
	if d1 != d2 || !bytes.Equal(tar1, tar2) {
		t.Errorf("two builds differ: %s and %s, tarballs equal: %v", d1, d2, bytes.Equal(tar1, tar2))
	}
	other := testSpec()
	other.binary = []byte("another program")
	img3, _ := writeImage(t, other)
	if d3, _ := img3.Digest(); d3 == d1 {
		t.Errorf("another binary gave the same digest %s", d3)
	}
}

// TestReadBack reads the tarball as docker load and crane push do (its
// manifest.json) and as containerd and skopeo do (its OCI layout), and
// checks that both give the image built, with its config and its one file.
func TestReadBack(t *testing.T) {
	s := testSpec()
	img, data := writeImage(t, s)
	want, _ := img.Digest()
	// docker load makes a manifest of its own from manifest.json: the
	// image it loads is the config (its ID) and the layers.
	wantID, _ := img.ConfigName()
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range s.tags {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		docker, err := tarball.ImageFromPath(path, &tag)
		if err != nil {
			t.Fatalf("manifest.json, %s: %v", ref, err)
		}
		if got, _ := docker.ConfigName(); got != wantID {
			t.Errorf("manifest.json, %s: image ID %s, want %s", ref, got, wantID)
		}
		checkImage(t, "manifest.json "+ref, docker, s)
	}

	dir := t.TempDir()
	untar(t, data, dir)
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("OCI layout: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != len(s.tags) {
		t.Fatalf("index.json names %d images, want one per tag (%d)", len(m.Manifests), len(s.tags))
	}
	for i, d := range m.Manifests {
		if d.Digest != want {
			t.Errorf("index.json[%d]: %s, want %s", i, d.Digest, want)
		}
		if got := d.Annotations["io.containerd.image.name"]; got != s.tags[i] {
			t.Errorf("index.json[%d]: io.containerd.image.name %q, want %q", i, got, s.tags[i])
		}
		oci, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, "index.json", oci, s)
	}
}

func checkImage(t *testing.T, what string, img v1.Image, s spec) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("%s: config: %v", what, err)
	}
	if cfg.Config.User != s.user || cfg.OS != "linux" || cfg.Architecture != "amd64" || !cfg.Created.Equal(s.created) {
		t.Errorf("%s: user %q, platform %s/%s, created %s", what, cfg.Config.User, cfg.OS, cfg.Architecture, cfg.Created)
	}
	for k, v := range s.labels {
		if cfg.Config.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", what, k, cfg.Config.Labels[k], v)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%s: %d layers, %v", what, len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	h, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(tr)
	if h.Name != "fieldwatch" || h.Mode != 0o755 || h.Uid != 0 || !bytes.Equal(body, s.binary) {
		t.Errorf("%s: layer holds %s mode %o uid %d (%d bytes), want fieldwatch 755 uid 0", what, h.Name, h.Mode, h.Uid, len(body))
	}
	if _, err := tr.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("%s: the layer holds more than the binary", what)
	}
}

func untar(t *testing.T, data []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, _ := io.ReadAll(tr)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBadInput: a relative path or a tag without a registry is refused.
func TestBadInput(t *testing.T) {
	for _, mod := range []func(*spec){
		func(s *spec) { s.path = "fieldwatch" },
		func(s *spec) { s.tags = []string{"not a tag"} },
		func(s *spec) { s.tags = nil },
	} {
		s := testSpec()
		mod(&s)
		if _, err := build(s); err == nil {
			t.Errorf("%+v: built", s.tags)
		}
	}
}
