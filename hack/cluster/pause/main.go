// Command pause is the cluster's sandbox (pause) image's program: it holds
// a pod's namespaces, reaps the zombies it inherits as PID 1 of a pod
// that shares its process namespace, and exits on SIGTERM or SIGINT, as
// Kubernetes' pause does. make cluster builds it static and imports it
// under the name containerd's configuration gives the sandbox image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
