package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// list collects a repeated flag.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	binary := fs.String("binary", "", "the static program to put in the image")
	dest := fs.String("path", "", "its absolute path in the image (default /NAME of --binary)")
	user := fs.String("user", "65532:65532", "UID:GID the image runs as")
	created := fs.String("created", "0", "the image's time, in seconds since 1970 (the commit's: SOURCE_DATE_EPOCH)")
	platform := fs.String("platform", "linux/amd64", "OS/ARCH of the binary")
	out := fs.String("out", "", "the tarball to write")
	var tags, entrypoint, cmd, env, labels list
	fs.Var(&tags, "tag", "a full reference registry/repository:tag (repeatable)")
	fs.Var(&entrypoint, "entrypoint", "an argument of the entrypoint (repeatable; default the binary's path)")
	fs.Var(&cmd, "cmd", "an argument of the command (repeatable)")
	fs.Var(&env, "env", "KEY=VALUE (repeatable)")
	fs.Var(&labels, "label", "KEY=VALUE (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *binary == "" || *out == "" {
		return errors.New("--binary and --out are required")
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: %w", *created, err)
	}
	p, err := v1.ParsePlatform(*platform)
	if err != nil {
		return err
	}
	s := spec{binary: data, path: *dest, tags: tags, user: *user, cmd: cmd, env: env,
		labels: map[string]string{}, created: time.Unix(secs, 0).UTC(), platform: *p}
	if s.path == "" {
		s.path = "/" + filepath.Base(*binary)
	}
	s.entrypoint = entrypoint
	if len(s.entrypoint) == 0 {
		s.entrypoint = []string{s.path}
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		s.labels[k] = v
	}
	img, err := build(s)
	if err != nil {
		return err
	}
	tmp := *out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f, img, s.tags, s.created); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: wrote %s: %s (%s)\n", *out, strings.Join(s.tags, ", "), digest)
	return nil
}
