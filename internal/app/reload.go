package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fieldwatch/fieldwatch/fieldmetrics"
	"github.com/fieldwatch/fieldwatch/rules"
)

// loadRules loads the rules files and returns them with a digest of their
// content, so that a reload can tell whether anything changed.
func loadRules(files []string, metricsFile string) (*rules.Set, string, error) {
	h := sha256.New()
	all := files
	if metricsFile != "" {
		all = append(slices.Clone(files), metricsFile)
	}
	for _, f := range all {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("read rules: %w", err)
		}
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", f, len(data))
		h.Write(data)
	}
	if len(files) == 0 {
		// Metrics from fields alone (--metrics-config): no rule.
		set, err := rules.Compile(rules.File{})
		return set, hex.EncodeToString(h.Sum(nil)), err
	}
	set, err := rules.Load(files...)
	if err != nil {
		return nil, "", err
	}
	return set, hex.EncodeToString(h.Sum(nil)), nil
}

// watchRules reloads the rules when a rules file changes and on SIGHUP
// (which also reopens the log action's files). It watches the files'
// directories rather than the files, so that it sees the symlink swap with
// which Kubernetes updates a mounted ConfigMap.
func (a *app) watchRules(ctx context.Context) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	fw, err := fsnotify.NewWatcher()
	if err != nil {
		a.log.Error("cannot watch the rules files; reload with SIGHUP", "error", err)
	} else {
		defer func() { _ = fw.Close() }()
		dirs := map[string]bool{}
		for _, f := range a.cfg.RulesFiles {
			dirs[filepath.Dir(f)] = true
		}
		if a.cfg.Metrics.File != "" {
			dirs[filepath.Dir(a.cfg.Metrics.File)] = true
		}
		for d := range dirs {
			if err := fw.Add(d); err != nil {
				a.log.Error("cannot watch a rules directory; reload with SIGHUP", "dir", d, "error", err)
			}
		}
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if fw != nil {
		events, errs = fw.Events, fw.Errors
	}
	var settle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			a.log.Info("SIGHUP: reloading rules and reopening log files")
			if d := a.disp.Load(); d != nil {
				if err := d.Reopen(); err != nil {
					a.log.Error("reopen log files", "error", err)
				}
			}
			a.reloadRules(ctx)
		case <-events:
			// Editors and ConfigMap updates write in several steps:
			// reload once they settle.
			settle = time.After(250 * time.Millisecond)
		case err := <-errs:
			a.log.Warn("watching rules files", "error", err)
		case <-settle:
			settle = nil
			a.reloadRules(ctx)
		}
	}
}

// reloadRules loads the rules files again. Invalid rules are logged and counted
// and the running rules stay; valid ones replace them, and the watcher
// adjusts its informers (those of resources still in use keep running).
func (a *app) reloadRules(ctx context.Context) {
	a.reload.Lock()
	defer a.reload.Unlock()
	set, digest, err := loadRules(a.cfg.RulesFiles, a.cfg.Metrics.File)
	if err == nil {
		err = a.checkRules(ctx, set)
	}
	var ms *fieldmetrics.Set
	if err == nil {
		ms, err = a.loadMetrics()
	}
	if err != nil {
		a.metrics.reloadFails.Inc()
		a.log.Error("rules reload failed; the previous rules keep running", "error", err)
		return
	}
	if digest == a.digest {
		return
	}
	a.digest = digest
	a.auditScope.Store(newAuditScope(set.Selectors()))
	a.set.Store(set)
	a.metrics.reloads.Inc()
	a.metrics.rules.Set(float64(len(set.Rules())))
	a.reloadMetrics(ms)
	if w := a.watcher.Load(); w != nil {
		w.SetSelectors(set.Selectors(), a.projection(set, ms), a.namespaces(set, ms))
		w.SetCache(cacheSelectors(ms))
	}
	if d := a.disp.Load(); d != nil {
		d.Retain(set.Rules())
	}
	a.log.Info("rules reloaded", "rules", len(set.Rules()))
}
