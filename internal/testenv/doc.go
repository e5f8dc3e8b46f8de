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
// them and SkipShort skips the other slow ones. Beside the control plane it has
// what several test packages need: Eventually to poll a condition, a TCP
// Proxy to cut a client off, writers acting as other users (Impersonating,
// ServiceAccountWriter), and the certificates and apiserver flags of an
// audit webhook (Audit, NewAuditTLS).
//
// testenv is for tests and hack/ programs only; production packages must
// not import it.
package testenv
