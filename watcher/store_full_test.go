package watcher

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fieldwatch/fieldwatch/change"
	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// TestStoreFullVolume: the baseline on a small tmpfs that another file
// fills. Its commits fail; it keeps their writes, each object's last
// one, counts the failures and says so once, not at every commit; once
// the file is removed the next commit records every object, each at its
// last state, and says the baseline is written again.
func TestStoreFullVolume(t *testing.T) {
	testenv.SkipShort(t, testenv.NeedsRoot)
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (the project's machines and CI run as root)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount a 4 MiB tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	var logs testenv.SyncBuffer
	s, err := OpenStore(filepath.Join(dir, "baseline.db"), slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the volume: %v", err)
			}
			break
		}
	}
	_ = f.Close()

	res := change.Resource{Group: widgets.Group, Version: widgets.Version, Resource: widgets.Resource, Kind: "Widget", Namespaced: true, Custom: true, Preferred: true}
	typ := &objectType{gvk: widgets.GroupVersion().WithKind("Widget"), apiVersion: "example.com/v1", projection: change.Projection{Paths: [][]string{{"spec"}}}}
	const objects, rounds = 500, 3
	pad := strings.Repeat("x", 1<<10)
	for round := range rounds {
		for i := range objects {
			u := widget("ns", fmt.Sprintf("w-%03d", i), int64(round))
			u.Object["spec"].(map[string]any)["pad"] = pad
			o, err := newObject(u.Object, typ)
			if err != nil {
				t.Fatal(err)
			}
			o.setUID(types.UID(fmt.Sprintf("uid-%03d", i)))
			o.resourceVersion = fmt.Sprint(round*objects + i + 1)
			s.put(res, o)
		}
	}
	testenv.Eventually(t, 30*time.Second, "commits failing on the full volume", func() bool { return s.failed() >= 3 })
	if n := s.waiting(); n != objects {
		t.Errorf("%d writes kept while the volume is full, want %d: each object's last", n, objects)
	}
	if n := s.count(); n != 0 {
		t.Errorf("%d objects recorded on a full volume", n)
	}
	if n := strings.Count(logs.String(), "writing the baseline failed"); n != 1 {
		t.Errorf("%d log lines about the failed commits in the first seconds, want 1:\n%s", n, logs.String())
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "every object recorded once there is room", func() bool {
		return s.waiting() == 0 && s.count() == objects
	})
	if !strings.Contains(logs.String(), "the baseline is written again") {
		t.Errorf("no log line says the baseline is written again:\n%s", logs.String())
	}
	if err := s.Close(); err != nil {
		t.Errorf("close after the volume had room again: %v", err)
	}
	s, err = OpenStore(filepath.Join(dir, "baseline.db"), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	got, err := s.load(widgets.GroupResource(), res)
	if err != nil {
		t.Fatal(err)
	}
	for i := range objects {
		o := got[types.UID(fmt.Sprintf("uid-%03d", i))]
		if want := fmt.Sprint((rounds-1)*objects + i + 1); o == nil || o.resourceVersion != want {
			t.Errorf("uid-%03d recorded %v, want resourceVersion %s", i, o, want)
		}
	}
}
