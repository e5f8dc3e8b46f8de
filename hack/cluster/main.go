// Command fieldwatch-cluster runs a real one-node Kubernetes on this
// machine (make cluster, make cluster-down): etcd and kube-apiserver
// (hack/controlplane), kube-controller-manager, kube-scheduler, the
// kubelet and kube-proxy (k8s.io/kubernetes, hack/cluster/kubernetes),
// containerd with Debian's runc and CNI bridge plugin
// (hack/cluster/containerd), the pause image built here, a local volume
// provisioner and the cluster DNS (CoreDNS, hack/cluster/coredns). It binds and advertises only on
// loopback and on the bridge it creates, and keeps the pods' and
// Services' traffic on the machine with filter rules installed before
// anything starts.
//
//	fieldwatch-cluster up [--image FILE.tar]...  start it (or say it runs) and import the images
//	fieldwatch-cluster down                      stop it and remove all it left
//	fieldwatch-cluster status                    exit 0 when every part runs
//	fieldwatch-cluster load FILE.tar...          import images into its containerd
//	fieldwatch-cluster ctr ARGS...               ctr on its containerd's socket
//	fieldwatch-cluster provision --kubeconfig F  the volume provisioner (up starts it)
//
// Run from the repository (bin/cluster holds the kubeconfig, the logs and
// the certificates); it needs root.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fieldwatch/fieldwatch/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runCmd(ctx, os.Args[1:])
	stop()
	if err != nil {
		_, _ = fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
}

// imageFlags collects repeated --image flags.
type imageFlags []string

func (f *imageFlags) String() string     { return strings.Join(*f, ",") }
func (f *imageFlags) Set(v string) error { *f = append(*f, v); return nil }

func runCmd(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: fieldwatch-cluster up|down|status|load|ctr|provision")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	p := newPaths(root)
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	switch args[0] {
	case "up":
		var images imageFlags
		fs.Var(&images, "image", "an image tarball to import into containerd (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		return up(ctx, p, self, images)
	case "down":
		return down(p)
	case "status":
		s := status()
		fmt.Printf("running: %s\nstopped: %s\n", strings.Join(s.running, " "), strings.Join(s.stopped, " "))
		if !s.allRunning() {
			return errors.New("not running")
		}
		return nil
	case "load":
		if !running("containerd") {
			return errors.New("not running: make cluster")
		}
		return importImages(ctx, p, args[1:])
	case "ctr":
		cmd := exec.CommandContext(ctx, p.binary("ctr"), append([]string{"-a", containerdSocket}, args[1:]...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		return cmd.Run()
	case "provision":
		kubeconfig := fs.String("kubeconfig", "", "the provisioner's kubeconfig")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		cs, err := clientset(*kubeconfig)
		if err != nil {
			return err
		}
		return provision(ctx, cs, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	}
	return fmt.Errorf("unknown command %q", args[0])
}
