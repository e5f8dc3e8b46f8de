package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// historySection measures the history's cost side by side on one stream
// of updates: CPU per change of fieldwatch with a log action and a state
// directory, without and with the history (SQLite in the state
// directory), beside the bare informer; and the bytes the history takes
// on disk per entry.
func (b *bench) historySection(ctx context.Context) error {
	n := b.o.updates
	if n > b.o.configMaps {
		return fmt.Errorf("-updates %d > -configmaps %d: updates of one object would coalesce", n, b.o.configMaps)
	}
	logRules, err := b.counterRules("history-log", "log: {}")
	if err != nil {
		return err
	}
	offDir, onDir := filepath.Join(b.dir, "state-history-off"), filepath.Join(b.dir, "state-history-on")
	bare, err := startBare(b.kubeconfig, cmNS, "configmaps")
	if err != nil {
		return err
	}
	defer bare.stop()
	off, err := startFieldwatch("fieldwatch-history-off", b.binary, b.kubeconfig, logRules, nil, "--state-dir", offDir, "--history=false")
	if err != nil {
		return err
	}
	defer off.stop()
	on, err := startFieldwatch("fieldwatch-history-on", b.binary, b.kubeconfig, logRules, nil, "--state-dir", onDir)
	if err != nil {
		return err
	}
	defer on.stop()
	for _, p := range []*process{bare, off, on} {
		if err := p.waitSynced(3 * time.Minute); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second) // let start-up work settle before reading CPU
	// The history's writer counts its own CPU on the thread it has to
	// itself: the process's CPU moves with everything else (two
	// processes on one stream differ by several percent from run to
	// run), the writer's does not.
	const writerCPU = "fieldwatch_history_cpu_seconds_total "
	cpu0 := map[*process]time.Duration{bare: bare.cpu(), off: off.cpu(), on: on.cpu()}
	writer0 := on.metric(writerCPU)
	cms := b.dyn.Resource(configMapsGVR).Namespace(cmNS)
	run := time.Now().UnixNano()
	_, _ = fmt.Fprintf(os.Stderr, "bench: history: %d updates to three consumers\n", n)
	if err := patchUpdates(ctx, cms, n, func(i int) string { return fmt.Sprintf("%d-history-%d", run, i) }); err != nil {
		return err
	}
	for _, p := range []*process{bare, off, on} {
		if _, err := p.waitCount(int64(n), 5*time.Minute); err != nil {
			return err
		}
	}
	// The history is written after delivery (batches wait up to a
	// second): wait for its last batch, reading /metrics seldom, since
	// each read costs the history-on process CPU the others do not spend.
	const written = `fieldwatch_history_entries_total{result="written"}`
	deadline := time.Now().Add(time.Minute)
	for on.metric(written) < float64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the history wrote %.0f of %d entries", on.metric(written), n)
		}
		time.Sleep(250 * time.Millisecond)
	}
	cpu := map[*process]time.Duration{}
	for p, c0 := range cpu0 {
		cpu[p] = (p.cpu() - c0) / time.Duration(n)
	}
	writer := time.Duration((on.metric(writerCPU) - writer0) * float64(time.Second) / float64(n))
	entries := on.metric("fieldwatch_history_entries ")
	size := func(f string) int64 {
		fi, err := os.Stat(filepath.Join(onDir, f))
		if err != nil {
			return 0
		}
		return fi.Size()
	}
	db, wal := size("history.db"), size("history.db-wal")
	b.t.add("CPU per change, log action, state dir, history off", msCol(cpu[bare]), msCol(cpu[off]), ratio(float64(cpu[off]), float64(cpu[bare])),
		fmt.Sprintf("%d ConfigMap updates, 3 consumers on one stream", n))
	b.t.add("same, history on (SQLite in the state dir)", msCol(cpu[bare]), msCol(cpu[on]), ratio(float64(cpu[on]), float64(cpu[bare])),
		fmt.Sprintf("on/off %.2fx", float64(cpu[on])/float64(cpu[off])))
	b.t.add("history: its writer's CPU per entry (its own thread), over history off's CPU per change", "", fmt.Sprintf("%.1f µs", float64(writer)/float64(time.Microsecond)), "",
		fmt.Sprintf("(off + writer)/off %.3fx; the collector's share of its garbage aside", float64(cpu[off]+writer)/float64(cpu[off])))
	b.t.add("history: bytes on disk per entry", "", fmt.Sprintf("%.0f", float64(db)/max(entries, 1)), "",
		fmt.Sprintf("%.0f entries in history.db (%.1f MB); besides it, its log (%.1f MB, at most 4 MiB) and a reserve file (8 MiB)", entries, float64(db)/1e6, float64(wal)/1e6))
	return nil
}
