package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// cmRules fires on every create and update of ConfigMaps in namespace ns.
func cmRules(t *testing.T, ns string) string {
	return writeFile(t, "rules.yaml", fmt.Sprintf(`rules:
  - name: cm
    match:
      resources: [{group: "", kind: ConfigMap}]
      namespaces: [%s]
    on: [create, update]
    actions: [{log: {}}]
`, ns))
}

// createConfigMaps creates n ConfigMaps named prefix-i.
func createConfigMaps(t *testing.T, env *testenv.Env, ns, prefix string, n int) {
	t.Helper()
	cms := env.Clientset(t).CoreV1().ConfigMaps(ns)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", prefix, i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := cms.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// names returns how many times each object name appears in the payloads.
func names(ps ...[]map[string]any) map[string]int {
	out := map[string]int{}
	for _, list := range ps {
		for _, p := range list {
			out[fmt.Sprint(p["name"])]++
		}
	}
	return out
}

// TestLeaderElection runs two replicas with --leader-elect: only the
// leader delivers; when it stops, the other takes over and delivers what
// follows. No change is delivered by both.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	ns := namespace(t, env, "leader")
	kc := env.WriteKubeconfig(t)
	rules := cmRules(t, ns)
	common := []string{"--rules", rules, "--leader-elect", "--leader-elect-namespace", ns, "--leader-elect-name", "fw"}
	a := startFieldwatch(t, kc, append(common, "--leader-elect-identity", "replica-a")...)
	b := startFieldwatch(t, kc, append(common, "--leader-elect-identity", "replica-b")...)

	var leader, standby *proc
	testenv.Eventually(t, 30*time.Second, "a leader", func() bool {
		la, lb := a.metric("fieldwatch_leader"), b.metric("fieldwatch_leader")
		switch {
		case la == 1 && lb == 0:
			leader, standby = a, b
		case lb == 1 && la == 0:
			leader, standby = b, a
		default:
			return false
		}
		code, body := leader.get("/readyz")
		return code == 200 && strings.TrimSpace(body) == "ok"
	})
	if code, body := standby.get("/readyz"); code != 200 || !strings.Contains(body, "standby") {
		t.Errorf("standby /readyz = %d %q", code, body)
	}

	createConfigMaps(t, env, ns, "first", 10)
	leader.waitPayloads(10, 30*time.Second)
	leader.stop() // releases the Lease
	testenv.Eventually(t, 30*time.Second, "the standby to take over", func() bool {
		code, body := standby.get("/readyz")
		return standby.metric("fieldwatch_leader") == 1 && code == 200 && strings.TrimSpace(body) == "ok"
	})
	createConfigMaps(t, env, ns, "second", 10)
	standby.waitPayloads(10, 30*time.Second)

	got := names(inNamespace(leader.payloads(), ns), inNamespace(standby.payloads(), ns))
	for i := range 10 {
		for _, prefix := range []string{"first", "second"} {
			name := fmt.Sprintf("%s-%02d", prefix, i)
			if got[name] != 1 {
				t.Errorf("%s delivered %d times, want once", name, got[name])
			}
		}
	}
	for _, pl := range inNamespace(leader.payloads(), ns) {
		if strings.HasPrefix(fmt.Sprint(pl["name"]), "second") {
			t.Errorf("the old leader delivered %s after it stopped", pl["name"])
		}
	}
}

// TestShards runs two shards; together they deliver each change exactly
// once, each only its own objects. Without the ShardedListAndWatch gate the
// client filters.
func TestShards(t *testing.T) {
	t.Parallel()
	env := testenv.Shared(t)
	testShards(t, env, "shards-client", "client-side", 0)
}

// TestShardsServerSide is TestShards on an apiserver with
// ShardedListAndWatch, where each replica lists and watches only its range.
func TestShardsServerSide(t *testing.T) {
	t.Parallel()
	env := testenv.Start(t, testenv.Options{FeatureGates: []string{"ShardedListAndWatch=true"}})
	testShards(t, env, "shards-server", "server-side", 1)
}

func testShards(t *testing.T, env *testenv.Env, ns, mode string, serverSide float64) {
	namespace(t, env, ns)
	kc := env.WriteKubeconfig(t)
	rules := cmRules(t, ns)
	s0 := startFieldwatch(t, kc, "--rules", rules, "--shard", "0", "--total-shards", "2")
	s1 := startFieldwatch(t, kc, "--rules", rules, "--shard", "1", "--total-shards", "2")
	for _, s := range []*proc{s0, s1} {
		if !strings.Contains(s.logs(), `"mode":"`+mode) {
			t.Errorf("the log does not say the sharding is %s", mode)
		}
		if v := s.metric("fieldwatch_shard_server_side"); v != serverSide {
			t.Errorf("fieldwatch_shard_server_side = %v, want %v", v, serverSide)
		}
	}
	const n = 40
	createConfigMaps(t, env, ns, "cm", n)
	testenv.Eventually(t, 30*time.Second, "every ConfigMap", func() bool {
		return len(inNamespace(s0.payloads(), ns))+len(inNamespace(s1.payloads(), ns)) >= n
	})
	p0, p1 := inNamespace(s0.payloads(), ns), inNamespace(s1.payloads(), ns)
	got := names(p0, p1)
	for i := range n {
		if name := fmt.Sprintf("cm-%02d", i); got[name] != 1 {
			t.Errorf("%s delivered %d times, want once", name, got[name])
		}
	}
	if len(p0) == 0 || len(p1) == 0 {
		t.Errorf("shard 0 delivered %d, shard 1 %d: the split is not shared", len(p0), len(p1))
	}
}
