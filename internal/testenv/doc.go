// Package testenv starts the real local control plane (kube-apiserver and
// etcd, built into bin/ by `make controlplane`) for fieldwatch's
// integration tests and demo, through controller-runtime's envtest.
//
// A test package starts one control plane for all its tests from TestMain
// and reads it in each test:
//
//	func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}) }
//
//	func TestX(t *testing.T) {
//		env := testenv.Shared(t)
//		cs := env.Clientset(t)
//		...
//	}
//
// Tests that stop or reconfigure the apiserver (an audit policy, feature
// gates) start their own with Start. When the binaries are missing the
// start fails with a message that says to run `make controlplane`: tests
// that need Kubernetes are never skipped, except under `go test -short`
// (`make unit`, the unit tier), where Shared, Start and StartPostgres skip
// them and SkipShort skips the other slow ones.
//
// Beside the control plane it holds the helpers the test packages share,
// e2e/ and charts/e2e (through charts/go.mod's replace directive)
// included, so that each exists once: Eventually, Poll and Wait to poll a
// condition; SpentCPU to bound work by CPU time rather than the wall
// clock; the one certificate minter (CA, NewAuditTLS); a TCP Proxy to cut
// a client off; writers acting as other users (Impersonating,
// ServiceAccountWriter); the apiserver flags of an audit webhook (Audit);
// PostgreSQL (StartPostgres); and for the end-to-end tests the pods' log
// follower (PodLogs) and the Widget writers whose writes losscheck checks
// (WidgetWriters).
//
// testenv is for tests and hack/ programs only; production packages must
// not import it.
package testenv
