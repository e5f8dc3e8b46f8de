package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func versionCmd(_ context.Context, _ []string, stdout, _ io.Writer) int {
	clientGo := "unknown"
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "k8s.io/client-go" {
				clientGo = d.Version
			}
		}
	}
	_, _ = fmt.Fprintf(stdout, "fieldwatch %s (%s, client-go %s, %s/%s)\n", version, runtime.Version(), clientGo, runtime.GOOS, runtime.GOARCH)
	return 0
}
