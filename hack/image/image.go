// Command image builds a container image from a static binary without
// Docker: an empty base, one layer holding the binary, a config with the
// user, entrypoint, command and labels given, written as one tarball that
// is both an OCI image layout (index.json, oci-layout, blobs/) and a
// `docker save` archive (manifest.json naming the same blobs), as Docker
// 25 and later write it. So `docker load`, `kind load image-archive`,
// `ctr images import`, `crane push` and skopeo's oci-archive all read it.
//
// Every timestamp is --created (the commit's time) and the layer's files
// belong to root, so the same binary gives the same image digest.
//
//	image --binary bin/image/fieldwatch --path /fieldwatch --tag fieldwatch.local/fieldwatch:v1 \
//	      --user 65532:65532 --entrypoint /fieldwatch --cmd run --cmd --rules=/etc/fieldwatch/rules.yaml \
//	      --label org.opencontainers.image.version=v1 --created 1767225600 --out bin/fieldwatch-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// spec is what an image is built from.
type spec struct {
	binary     []byte   // the program
	path       string   // where it goes in the image, absolute
	tags       []string // full references: registry/repository:tag
	user       string   // UID:GID
	entrypoint []string // the config's Entrypoint
	cmd        []string // the config's Cmd
	env        []string // KEY=VALUE
	labels     map[string]string
	created    time.Time // every timestamp of the image
	platform   v1.Platform
}

// build returns the image spec describes.
func build(s spec) (v1.Image, error) {
	if !path.IsAbs(s.path) || path.Clean(s.path) != s.path {
		return nil, fmt.Errorf("--path %q: want a clean absolute path", s.path)
	}
	if len(s.tags) == 0 {
		return nil, errors.New("no --tag")
	}
	for _, t := range s.tags {
		if _, err := name.NewTag(t, name.StrictValidation); err != nil {
			return nil, fmt.Errorf("--tag %q: want registry/repository:tag: %w", t, err)
		}
	}
	files, err := layerTar(s)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(files)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	created := v1.Time{Time: s.created.UTC()}
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: created, CreatedBy: "hack/image: COPY " + path.Base(s.path) + " " + s.path, Comment: "built without Docker",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Created = created
	cfg.OS, cfg.Architecture, cfg.Variant = s.platform.OS, s.platform.Architecture, s.platform.Variant
	cfg.Config = v1.Config{
		User:       s.user,
		Entrypoint: s.entrypoint,
		Cmd:        s.cmd,
		Env:        s.env,
		Labels:     s.labels,
		WorkingDir: "/",
	}
	return mutate.ConfigFile(img, cfg)
}

// layerTar is the layer's files: the binary, owned by root, mode 0755,
// with the image's time.
func layerTar(s spec) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []string{}
	for d := path.Dir(s.path); d != "/"; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755,
			ModTime: s.created, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(s.path, "/"), Mode: 0o755,
		Size: int64(len(s.binary)), ModTime: s.created, Format: tar.FormatPAX}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(s.binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// dockerManifest is one entry of `docker save`'s manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// write writes img under every tag as one tarball: an OCI image layout
// whose index names the image once per tag (io.containerd.image.name:
// the full reference; org.opencontainers.image.ref.name: the tag, as
// Docker writes them), with a manifest.json for docker load beside it.
func write(w io.Writer, img v1.Image, tags []string, created time.Time) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	blobs := map[string][]byte{}
	add := func(data []byte) string {
		h, _, _ := v1.SHA256(bytes.NewReader(data))
		p := "blobs/sha256/" + h.Hex
		blobs[p] = data
		return p
	}
	add(manifest)
	dm := dockerManifest{Config: add(config), RepoTags: tags}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return err
		}
		dm.Layers = append(dm.Layers, add(data))
	}
	desc, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, t := range tags {
		ref, _ := name.NewTag(t, name.StrictValidation)
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: mt, Size: int64(len(manifest)), Digest: desc,
			Annotations: map[string]string{"io.containerd.image.name": ref.Name(), "org.opencontainers.image.ref.name": ref.TagStr()},
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	dmJSON, err := json.Marshal([]dockerManifest{dm})
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"oci-layout":    []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":    indexJSON,
		"manifest.json": dmJSON,
	}
	for p, data := range blobs {
		files[p] = data
	}
	return writeTar(w, files, created)
}

// writeTar writes files in name order, with their directories, owned by
// root and dated created.
func writeTar(w io.Writer, files map[string][]byte, created time.Time) error {
	tw := tar.NewWriter(w)
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	})
	written := map[string]bool{}
	for _, n := range names {
		for _, d := range parents(n) {
			if written[d] {
				continue
			}
			written[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: created, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		data := files[n]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(data)), ModTime: created, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// parents returns the directories of a slash path, outermost first.
func parents(p string) []string {
	var ds []string
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		ds = append([]string{d}, ds...)
	}
	return ds
}
