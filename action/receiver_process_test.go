package action

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

// benchReceiverEnv, in the environment of this test binary, makes it a
// webhook receiver process (benchReceiverMain) rather than the tests:
// a benchmark's receiver out of its process, so that the benchmark's CPU
// time and allocations are the client's alone.
const benchReceiverEnv = "FIELDWATCH_BENCH_RECEIVER"

// benchReceiverSpec is the receiver process's configuration: plain HTTP
// (HTTP/1.1 and HTTP/2 with prior knowledge) without a certificate, TLS
// (HTTP/1.1 and HTTP/2 by ALPN) with one.
type benchReceiverSpec struct {
	CertFile string `json:"certFile,omitempty"`
	KeyFile  string `json:"keyFile,omitempty"`
}

// startReceiverProcess starts this test binary as a webhook receiver on
// 127.0.0.1 and returns its URL and, with useTLS, the file of the CA
// that issued its certificate. The process ends with the benchmark.
func startReceiverProcess(b *testing.B, useTLS bool) (url, caFile string) {
	b.Helper()
	var spec benchReceiverSpec
	scheme := "http"
	if useTLS {
		ca, err := testenv.NewCA("bench-receiver-ca")
		if err != nil {
			b.Fatal(err)
		}
		cert, key, err := ca.ServerCert("bench-receiver")
		if err != nil {
			b.Fatal(err)
		}
		paths, err := testenv.WriteFiles(b.TempDir(),
			testenv.NamedData{Name: "ca.pem", Data: ca.CertPEM},
			testenv.NamedData{Name: "cert.pem", Data: cert},
			testenv.NamedData{Name: "key.pem", Data: key})
		if err != nil {
			b.Fatal(err)
		}
		caFile, spec.CertFile, spec.KeyFile = paths[0], paths[1], paths[2]
		scheme = "https"
	}
	conf, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchReceiverEnv+"="+string(conf))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close() // the receiver ends at its stdin's end
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		b.Fatalf("receiver process: %v", err)
	}
	return scheme + "://" + strings.TrimSpace(addr) + "/hook", caFile
}

// benchReceiverMain runs the receiver process when benchReceiverEnv is
// set (ok), returning its exit code: it serves on 127.0.0.1, writes its
// address as the first line of its stdout, and returns once its stdin
// ends.
func benchReceiverMain() (code int, ok bool) {
	conf := os.Getenv(benchReceiverEnv)
	if conf == "" {
		return 0, false
	}
	if err := runBenchReceiver(conf); err != nil {
		fmt.Fprintf(os.Stderr, "bench receiver: %v\n", err)
		return 1, true
	}
	return 0, true
}

func runBenchReceiver(conf string) error {
	var spec benchReceiverSpec
	if err := json.Unmarshal([]byte(conf), &spec); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	if spec.CertFile == "" {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	served := make(chan error, 1)
	go func() {
		if spec.CertFile != "" {
			served <- srv.ServeTLS(ln, filepath.Clean(spec.CertFile), filepath.Clean(spec.KeyFile))
			return
		}
		served <- srv.Serve(ln)
	}()
	if _, err := fmt.Println(ln.Addr().String()); err != nil {
		return err
	}
	stdinDone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinDone)
	}()
	select {
	case err := <-served:
		return err
	case <-stdinDone:
		return srv.Close()
	}
}
