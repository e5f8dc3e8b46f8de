# fieldwatch Makefile. `make help` lists the targets.
# A fresh machine needs only Go and the Go module proxy: every target builds
# what it needs, the local control plane (kube-apiserver + etcd) included.

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)

GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
BENCHSTAT := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

TEST_FLAGS ?= -race -count=1 -timeout 45m
FUZZ_TIME ?= 10s

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/fieldwatch
	$(GO) build -o $(BIN)/fieldwatch ./cmd/fieldwatch

.PHONY: controlplane
controlplane: ## build kube-apiserver and etcd into bin/ (once; about 12 minutes the first time)
	hack/controlplane/build.sh

.PHONY: check
check: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

.PHONY: lint
lint: check ## gofmt, go vet and golangci-lint (pinned)
	$(GO) run $(GOLANGCI_LINT) run ./...

.PHONY: test
test: controlplane check ## unit and integration tests with -race on the real control plane
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: demo
demo: controlplane build ## run fieldwatch on a local control plane and show what fires
	$(GO) run ./hack/demo

.PHONY: clean
clean: ## remove build outputs (keeps the control plane binaries)
	rm -f $(BIN)/fieldwatch
	$(GO) clean -testcache

.PHONY: distclean
distclean: ## remove bin/ entirely, the control plane included
	rm -rf $(BIN)
