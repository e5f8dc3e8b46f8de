# fieldwatch Makefile. `make help` lists the targets.
# A fresh machine needs only Go and the Go module proxy: every target builds
# what it needs, the local control plane (kube-apiserver + etcd) included;
# `make test` also installs Debian's postgresql and chromium packages when
# they are missing (testdeps).

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
export KUBEBUILDER_ASSETS := $(BIN)

GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
BENCHSTAT := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

# -p 4: the integration tests mostly wait on their control planes, so four
# packages at a time keep 2 cores busy where -p 2 (GOMAXPROCS) left one idle.
# -parallel 4: so do the end-to-end tests of cmd/fieldwatch (fieldwatch
# processes, leases, receivers), which run in parallel; run alone at a load
# of 6 to 13, the package took 122 s with 2 (GOMAXPROCS) and 64 s with 4.
TEST_FLAGS ?= -race -count=1 -timeout 45m -p 4 -parallel 4
# TEST_PKGS lists the packages whose tests take longest first: go test
# starts packages in the order given (four at a time, -p 4), and ./...
# alone started watcher, the last in import path order and among the
# longest, only once the others left a slot, 190 s into the run.
TEST_PKGS ?= ./cmd/fieldwatch ./watcher ./internal/app ./internal/audit ./examples ./action ./rules ./...
# FUZZ_TIME is an execution count ("Nx"), not a duration: with a duration,
# Go 1.26's fuzz coordinator can fail a clean run with "context deadline
# exceeded" as the time runs out (go.dev/issue/75804, fixed in Go 1.27).
# 5000x each keeps every target in every `make test` for about a third of
# the CPU of 20000x (measured: 1m31s against 2m50s user time); `make fuzz`
# runs them long.
FUZZ_TIME ?= 5000x
# FUZZ_MINIMIZE bounds the minimization of each new interesting input (Go's
# default, 60s, stalled a short run for tens of seconds per input found).
FUZZ_MINIMIZE ?= 1000x

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  make %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# QUIETGO folds the thousands of "go: downloading" lines of a first build
# into one progress line.
QUIETGO := $(CURDIR)/hack/quietgo.sh

.PHONY: build
build: ## build bin/fieldwatch (static, as in the image)
	CGO_ENABLED=0 $(QUIETGO) $(GO) build -o $(BIN)/fieldwatch ./cmd/fieldwatch

.PHONY: ksm
ksm: $(BIN)/kube-state-metrics ## build bin/kube-state-metrics (the version hack/ksm pins), the peer of the metrics from fields in the tests and make bench

$(BIN)/kube-state-metrics: hack/ksm/go.mod hack/ksm/go.sum
	cd hack/ksm && $(QUIETGO) $(GO) build -o $(BIN)/kube-state-metrics k8s.io/kube-state-metrics/v2

.PHONY: controlplane
controlplane: ## build kube-apiserver and etcd into bin/ (once; about 12 minutes the first time)
	hack/controlplane/build.sh

# testdeps installs what the tests start besides the control plane:
# PostgreSQL (the history's shared store), Chromium (its page) and
# Alertmanager (the alertmanager action's receiver) and Prometheus (it
# scrapes the metrics from fields), from Debian's packages, as root. No
# cluster is created at install (so no server starts): the tests
# initialise and start their own.
.PHONY: testdeps
testdeps: ## install Debian's postgresql, chromium, prometheus and prometheus-alertmanager for the tests, when missing (apt-get, as root)
	@missing=""; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	  [ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	  [ -x /usr/bin/prometheus ] || missing="$$missing prometheus"; \
	  [ -x /usr/bin/prometheus-alertmanager ] || missing="$$missing prometheus-alertmanager"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing$$missing from Debian's packages"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -q && apt-get install -y -q --no-install-recommends postgresql-common && \
	    mkdir -p /etc/postgresql-common/createcluster.d && \
	    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/fieldwatch-tests.conf && \
	    apt-get install -y -q --no-install-recommends $$missing; \
	  fi

.PHONY: check
check: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(QUIETGO) $(GO) vet ./...
	$(QUIETGO) $(GO) vet -tags e2e ./e2e/
	cd charts && $(QUIETGO) $(GO) vet ./... && $(QUIETGO) $(GO) vet -tags e2e ./e2e/
	cd hack/image && $(QUIETGO) $(GO) vet ./...

.PHONY: hooks
hooks: ## check each commit's message as it is made (.githooks/commit-msg: a subject of at most 72 characters, then a blank line)
	git config core.hooksPath .githooks

.PHONY: tidy
tidy: ## check that go mod tidy would leave go.mod and go.sum as they are
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy"; exit 1; }
	@cd charts && $(GO) mod tidy -diff || { echo "charts/go.mod or charts/go.sum is not tidy: run go mod tidy in charts/"; exit 1; }
	@cd hack/image && $(GO) mod tidy -diff || { echo "hack/image/go.mod or go.sum is not tidy: run go mod tidy there"; exit 1; }
	@cd hack/ksm && $(GO) mod tidy -diff || { echo "hack/ksm/go.mod or go.sum is not tidy: run go mod tidy there"; exit 1; }

.PHONY: lint
lint: check tidy ## gofmt, go vet, go mod tidy check and golangci-lint (pinned)
	$(GO) run $(GOLANGCI_LINT) run --build-tags e2e ./...
	cd charts && $(GO) run $(GOLANGCI_LINT) run --build-tags e2e ./...
	cd hack/image && $(GO) run $(GOLANGCI_LINT) run ./...

# The tests come in three tiers, as Kubernetes' do:
#   make unit         every package's fast tests: go test -short, -race;
#                     no control plane, PostgreSQL, Chromium, root or
#                     network beyond loopback (under -short, testenv skips
#                     the tests that need them and refuses to start them).
#   make integration  every go test of the three modules without -short,
#                     on a real control plane (bin/), PostgreSQL and
#                     Chromium, then fuzz-short. It includes the unit
#                     tests: go test has no flag for "only the long ones".
#   make e2e          the end-to-end tests on the one-node cluster.
# make test runs integration then e2e: the unit tests run once, inside
# integration, rather than a second time ahead of it. The chart's tests
# (charts/go.mod: Helm's SDK stays out of fieldwatch's go.mod), hack/image's
# and fuzz-short run after the go tests, one after the other: run beside
# them on two cores, their load starved a leader's Lease renewals
# (TestFailoverGap's leader lost its Lease twice in one run).
# UNIT_FLAGS leave go test's cache on: a package whose code and test
# inputs did not change is not linked and run again, so that make unit
# after a change in rules/ runs rules/ and what imports it. Linking the
# race-enabled test binaries is most of a full run's CPU time; add
# -count=1 to run every package anyway. -p 4 on two cores overlaps one
# package's link with another's tests that wait on timers and sockets
# (docs/development.md has the timing).
UNIT_FLAGS ?= -short -race -timeout 5m -p 4

.PHONY: unit
unit: ## the unit tier: every package's fast tests (-short, -race), no control plane, in about a minute
	$(GO) test $(UNIT_FLAGS) ./...
	cd charts && $(GO) test $(UNIT_FLAGS) ./...
	cd hack/image && $(GO) test $(UNIT_FLAGS) ./...

.PHONY: integration
integration: controlplane testdeps ksm ## the integration tier: every go test (unit ones too, the fault suite's aside) on a real control plane, PostgreSQL and Chromium, then fuzz-short
	$(GO) test $(TEST_FLAGS) -skip '$(FAULT_RUN)' $(TEST_PKGS)
	cd charts && $(GO) test $(TEST_FLAGS) ./...
	cd hack/image && $(GO) test $(TEST_FLAGS) ./...
	$(MAKE) --no-print-directory fuzz-short

.PHONY: test
test: check examples integration faults ## every tier: gofmt and go vet, the examples, make integration, make faults, then make e2e
	$(MAKE) --no-print-directory e2e

# The fault suite (docs/guarantees.md#faults-and-what-they-cost): each
# test fails a part around a running fieldwatch (the history's
# PostgreSQL, the apiserver and etcd's history, the network to the
# apiserver, the state volume, a leader, a receiver, the NATS server, the
# Kafka broker) under a steady stream of changes, and ends comparing
# every write with what was delivered and recorded (internal/losscheck);
# then a short soak (TestSoak, SOAK_DURATION). make integration leaves
# these tests to it (-skip), so that make test runs each once. One
# package at a time (-p 1): two of them stop a server for 20 to 30 s and
# a starved leader's Lease renewals would blur what they prove.
FAULT_RUN := ^(TestFault.*|TestSoak|TestStoreFullVolume|TestAPIServerRestart|TestPartitionAndCompaction|TestRelistObserved|TestSIGKILLRestart|TestWebhookReceiverDownThenBack|TestFailoverSIGKILL|TestFailoverPartition|TestNATSServerRestart|TestKafkaBrokerRestart)$$
FAULT_PKGS := ./cmd/fieldwatch ./internal/history ./watcher ./action
SOAK_DURATION ?= 2m

.PHONY: faults
faults: controlplane testdeps ## the fault suite: PostgreSQL stopped and killed, apiserver restarted with etcd compacted, packets dropped, state volume full, leader killed, brokers restarted, then a 2-minute soak (about 6 minutes)
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -race -count=1 -timeout 30m -p 1 -parallel 4 -run '$(FAULT_RUN)' $(FAULT_PKGS)

# make soak DURATION=1h: TestSoak alone, at SOAK_RATE writes a second
# (100) over SOAK_OBJECTS ConfigMaps (500), sampled every SOAK_SAMPLE
# (10s); the samples go to SOAK_OUT/soak.csv (bin/soak).
DURATION ?= 1h
.PHONY: soak
soak: controlplane testdeps ## run fieldwatch for DURATION (1h) at a steady rate, failing when goroutines, fds, heap, RSS, queues or the history grow past their bounds
	SOAK_DURATION=$(DURATION) SOAK_SAMPLE=$${SOAK_SAMPLE:-10s} SOAK_OUT=$${SOAK_OUT:-$(BIN)/soak} \
	  $(GO) test -race -count=1 -timeout 0 -run '^TestSoak$$' -v ./cmd/fieldwatch

.PHONY: helm
helm: ## build bin/helm: the Helm CLI of the version the chart's tests use (helm.sh/helm/v4, a tool of charts/go.mod)
	cd charts && $(QUIETGO) $(GO) build -o $(BIN)/helm helm.sh/helm/v4/cmd/helm

.PHONY: chart-golden
chart-golden: ## rewrite the chart's golden renders and its README's values table (charts/testdata, charts/fieldwatch/README.md)
	cd charts && $(GO) test -count=1 -run 'TestTemplateGolden|TestValuesTable' ./... -update

.PHONY: examples
examples: build ## run every example's cases through `fieldwatch test`
	@set -e; for rules in examples/*/rules.yaml; do \
	  dir=$$(dirname $$rules); \
	  echo "fieldwatch test --rules $$rules $$dir/cases.yaml"; \
	  $(BIN)/fieldwatch test -q --rules $$rules $$dir/cases.yaml; \
	done; \
	for crs in examples/metrics/*.crs.yaml; do \
	  echo "fieldwatch test --metrics-config $$crs $${crs%.crs.yaml}.cases.yaml"; \
	  $(BIN)/fieldwatch test -q --metrics-config $$crs $${crs%.crs.yaml}.cases.yaml; \
	done

# FUZZ_TARGETS are package:Fuzz pairs; go test -fuzz takes one at a time.
FUZZ_TARGETS := \
	./rules:FuzzLoad \
	./rules:FuzzCompilePath \
	./internal/fieldpath:FuzzParse \
	./rules:FuzzAppendJSON \
	./rules:FuzzRedaction \
	./rules:FuzzChangesApply \
	./internal/yamlstrict:FuzzUnmarshal \
	./action:FuzzParseRetryAfter \
	./action:FuzzVerifySignature \
	./action/internal/directhttp:FuzzQuickResponse \
	./crd/diff:FuzzCompare \
	./crd/diff:FuzzParse \
	./crd/validate:FuzzValidate \
	./internal/audit:FuzzDecodeEventList \
	./internal/history:FuzzParsePayload \
	./internal/jsonscan:FuzzFramer \
	./internal/jsonscan:FuzzDecode \
	./watcher/internal/watchstream:FuzzEventStream \
	./payload:FuzzUnmarshal \
	./internal/history/web:FuzzShorten \
	./fieldmetrics:FuzzParse

.PHONY: fuzz-short
fuzz-short: ## run every fuzz target briefly (FUZZ_TIME executions, default 5000x; FUZZ_MINIMIZE per new input)
	@set -e; for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "fuzz $$pkg $$fn, $(FUZZ_TIME)"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZ_TIME) -fuzzminimizetime $(FUZZ_MINIMIZE) $$pkg; \
	done

.PHONY: fuzz
fuzz: ## run every fuzz target longer (2,000,000 executions each)
	$(MAKE) fuzz-short FUZZ_TIME=2000000x FUZZ_MINIMIZE=100000x

.PHONY: deploy/base/rbac.yaml
deploy/base/rbac.yaml: build ## regenerate the deploy RBAC from deploy/base/rules.yaml (for the example CRDs)
	(echo "# Regenerate with: make deploy/base/rbac.yaml (fieldwatch rbac --offline --rules deploy/base/rules.yaml --leader-elect --history-api --crds examples/crds)."; \
	  echo "# It grants the custom resources of examples/crds only: for your cluster run"; \
	  echo "#   fieldwatch rbac --rules deploy/base/rules.yaml --leader-elect --history-api > deploy/base/rbac.yaml"; \
	  echo "# against it (or --offline --crds with your CRDs). Resources it may not read are skipped and logged."; \
	  $(BIN)/fieldwatch rbac --offline --rules deploy/base/rules.yaml --leader-elect --history-api --crds examples/crds) > deploy/base/rbac.yaml

# The image: the static binary on an empty base, built without Docker by
# hack/image (go-containerregistry), as bin/fieldwatch-image.tar: an OCI
# image layout with docker save's manifest.json beside it, which docker
# load, kind load image-archive, ctr images import and crane push read.
# Its time is the commit's, so a commit gives one digest.
IMAGE ?= fieldwatch.local/fieldwatch
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Expanded once: the image and the tests that run it name the same tag.
VERSION := $(VERSION)
IMAGE_TAG ?= $(VERSION)
IMAGE_TAG := $(IMAGE_TAG)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
IMAGE_TAR ?= $(BIN)/fieldwatch-image.tar

.PHONY: image
image: ## build the image without Docker into bin/fieldwatch-image.tar (fieldwatch.local/fieldwatch:VERSION; docker load / kind load image-archive / ctr import)
	CGO_ENABLED=0 $(QUIETGO) $(GO) build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o $(dir $(IMAGE_TAR))image/fieldwatch ./cmd/fieldwatch
	cd hack/image && $(GO) run . --binary $(dir $(IMAGE_TAR))image/fieldwatch --tag $(IMAGE):$(IMAGE_TAG) --user 65532:65532 \
	  --cmd run --cmd --rules --cmd /etc/fieldwatch/rules.yaml --created $(SOURCE_DATE_EPOCH) \
	  --label org.opencontainers.image.title=fieldwatch \
	  --label org.opencontainers.image.version=$(VERSION) --label org.opencontainers.image.revision=$(COMMIT) \
	  --label org.opencontainers.image.source=https://github.com/fieldwatch/fieldwatch \
	  --out $(IMAGE_TAR)

# The one-node cluster (hack/cluster): etcd and kube-apiserver (make
# controlplane), kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl (k8s.io/kubernetes v1.37.2), containerd v2.4.2
# with Debian's runc and CNI plugins, CoreDNS v1.15.0 as the cluster DNS.
# Root only; one per machine.
CLUSTER := $(BIN)/fieldwatch-cluster
PAUSE_IMAGE := fieldwatch.local/pause:3.10
CLUSTER_DEPS := runc containernetworking-plugins iptables conntrack socat iproute2 mount

.PHONY: cluster-deps
cluster-deps: ## install the cluster's Debian packages (runc, CNI plugins, iptables...) when missing
	@if command -v runc iptables conntrack socat ip >/dev/null && [ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ]; then \
	  echo "cluster-deps: $(CLUSTER_DEPS) are installed"; \
	else \
	  echo "cluster-deps: apt-get install $(CLUSTER_DEPS)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CLUSTER_DEPS) >/dev/null; \
	fi

.PHONY: cluster-build
cluster-build: controlplane ## build the cluster's binaries into bin/ (once; minutes after make controlplane) and its pause image
	hack/cluster/build.sh
	$(GO) build -o $(CLUSTER) ./hack/cluster
	@mkdir -p $(BIN)/cluster
	CGO_ENABLED=0 $(QUIETGO) $(GO) build -trimpath -ldflags "-s -w" -o $(BIN)/cluster/pause ./hack/cluster/pause
	cd hack/image && $(GO) run . --binary $(BIN)/cluster/pause --tag $(PAUSE_IMAGE) --user 65535:65535 --out $(BIN)/cluster/pause.tar

.PHONY: cluster
cluster: cluster-deps cluster-build image ## start a one-node Kubernetes here (or say it runs) with the image loaded; kubeconfig bin/cluster/kubeconfig
	$(CLUSTER) up --image $(IMAGE_TAR)

.PHONY: cluster-down
cluster-down: ## stop the cluster and remove everything it left (processes, mounts, bridge, iptables chains, cgroups)
	@if [ -x $(CLUSTER) ]; then $(CLUSTER) down; else $(GO) run ./hack/cluster down; fi

# with-cluster runs the command $(1) on the cluster with FIELDWATCH_IMAGE
# naming the image it loaded, starting the cluster when it does not run and
# stopping it again after.
define with-cluster
	@mkdir -p $(BIN); exec 9>$(BIN)/.cluster.lock; flock 9; \
	  started=0; \
	  if ! $(CLUSTER) status >/dev/null 2>&1; then started=1; fi; \
	  $(CLUSTER) up --image $(IMAGE_TAR) || { [ $$started -eq 1 ] && $(CLUSTER) down; exit 1; }; \
	  export FIELDWATCH_IMAGE=$(IMAGE):$(IMAGE_TAG); $(1); status=$$?; \
	  if [ $$started -eq 1 ]; then $(CLUSTER) down || status=1; fi; \
	  exit $$status
endef

# e2e runs the end-to-end tests (e2e/, build tag e2e) on the cluster, then
# the chart's (charts/e2e/, in the chart's module: Helm's SDK stays out of
# fieldwatch's go.mod) on the same cluster, even when the first failed.
# E2E_PKGS narrows them: "e2e" or "charts" alone.
E2E_FLAGS ?= -race -count=1 -timeout 40m -v
E2E_PKGS ?= e2e charts
.PHONY: e2e
e2e: cluster-deps cluster-build image helm ## end-to-end tests on the one-node cluster: deploy/ applied, failover, reload, rollout, audit, OOM; the chart installed, upgraded, rolled back, uninstalled; admission and the CRD guard
	$(call with-cluster,{ status=0; \
	  if [[ " $(E2E_PKGS) " == *" e2e "* ]]; then $(GO) test -tags e2e $(E2E_FLAGS) ./e2e/ || status=1; fi; \
	  if [[ " $(E2E_PKGS) " == *" charts "* ]]; then (cd charts && $(GO) test -tags e2e $(E2E_FLAGS) ./e2e/) || status=1; fi; \
	  [ $$status -eq 0 ]; })

.PHONY: bench-cluster
bench-cluster: cluster-deps cluster-build image ## the cluster's benchmarks: make cluster to a Ready node, deploy/ to both pods ready, the pod beside the same fieldwatch as a process
	$(call with-cluster,$(GO) test -tags e2e -count=1 -run '^$$' -bench . -benchtime 1x -timeout 30m ./e2e/)

.PHONY: bench
bench: controlplane build ksm ## fieldwatch vs a bare informer on a local control plane, CRD-count and object-count scenarios included: one table (about 30 minutes)
	$(GO) run ./hack/bench $(BENCH_FLAGS)

.PHONY: bench-go
bench-go: controlplane ## the go test benchmarks of watcher, internal/app, rules, action, internal/audit (admission too), internal/jsonscan, internal/history (trail and states too), crd/... and crd-diff
	$(GO) test -run '^$$' -bench . -benchtime 1x ./watcher
	$(GO) test -run '^$$' -bench . -benchtime 3x ./internal/app
	$(GO) test -run '^$$' -bench . ./rules ./action ./internal/audit ./internal/jsonscan ./crd/...
	$(GO) test -run '^$$' -bench CRDDiff -benchtime 1x ./cmd/fieldwatch
	$(GO) test -run '^$$' -bench 'Record|Trail$$' -benchtime 100000x ./internal/history
	$(GO) test -run '^$$' -bench Query1M -benchtime 200x -timeout 30m ./internal/history
	$(GO) test -run '^$$' -bench 'TrailExportVerify|StatesBytes|WriteStates' -benchtime 1x ./internal/history
	$(GO) test -run '^$$' -bench Rebuild ./internal/history

.PHONY: demo
demo: demo-intro controlplane build ## run fieldwatch on a local control plane: who made each change, a breaking CRD change, the widgets it hits and the history page (DEMO_FLAGS=-hold keeps it running)
	@$(QUIETGO) $(GO) build -o $(BIN)/demo ./hack/demo
	$(BIN)/demo $(DEMO_FLAGS)

# demo-intro says what make demo builds before it builds it.
.PHONY: demo-intro
demo-intro:
	@if [ -x $(BIN)/kube-apiserver ] && [ -x $(BIN)/etcd ]; then \
	  echo "make demo: builds bin/fieldwatch and the demo (a minute the first time), then runs it (under a minute)"; \
	else \
	  echo "make demo: builds kube-apiserver and etcd into bin/ from the Go module proxy (once: about 12 minutes on 2 cores),"; \
	  echo "then bin/fieldwatch and the demo (a minute or two), then runs it (under a minute)"; \
	fi

.PHONY: clean
clean: ## remove build outputs (keeps the control plane binaries)
	rm -f $(BIN)/fieldwatch $(BIN)/demo
	$(GO) clean -testcache

.PHONY: distclean
distclean: ## remove bin/ entirely, the control plane included
	rm -rf $(BIN)
