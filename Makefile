# AgentRun: an operator that runs LLM agents as Kubernetes resources.
# Tools run through `go tool` (pinned in go.mod); nothing is downloaded at build time.

# envtest's binaries (kube-apiserver, etcd) are built once from Go modules by
# hack/envtest-bins.sh and cached outside the repository (~8 min cold on 2 cores);
# a KUBEBUILDER_ASSETS from the environment wins.

CONTROLLER_GEN ?= go tool controller-gen
CRD_BASES = config/crd/bases
CHART_CRDS = charts/agentrun/crds

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: manifests generate fmt vet

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: ## Generate the CustomResourceDefinition and copy it into the Helm chart.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=$(CRD_BASES)
	go run ./hack/crdguard $(CRD_BASES)/agents.agentrun.dev_agentruns.yaml
	$(CONTROLLER_GEN) rbac:roleName=agentrun-manager paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac
	mkdir -p $(CHART_CRDS)
	cp $(CRD_BASES)/*.yaml $(CHART_CRDS)/
	cp config/rbac/role.yaml charts/agentrun/files/role.yaml
	mkdir -p charts/agentrun/files/admission
	cp config/admission/approval-policy.yaml config/admission/approver-identity.yaml config/admission/platform-policy.yaml config/admission/run-spec.yaml charts/agentrun/files/admission/
	cp config/rbac/aggregated_roles.yaml charts/agentrun/files/aggregated_roles.yaml

.PHONY: generate
generate: ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

GOLANGCI_LINT ?= go tool -modfile=hack/lint/go.mod golangci-lint

.PHONY: lint
lint: ## Run golangci-lint (.golangci.yml: the standard linters, depguard keeping internal/loop free of Kubernetes).
	$(GOLANGCI_LINT) run ./...

.PHONY: envtest
envtest: ## Build (once) and print the directory of envtest's kube-apiserver and etcd.
	@hack/envtest-bins.sh

.PHONY: test
test: manifests generate fmt vet ## Run every test that needs no real cluster (envtest included), then each fuzz target briefly.
	assets="$${KUBEBUILDER_ASSETS:-$$(hack/envtest-bins.sh)}"; \
	KUBEBUILDER_ASSETS="$$assets" go test ./...
	cd hack/promrules && go test -timeout 30m ./...
	$(MAKE) --no-print-directory fuzz

# Fuzz targets over what comes from outside (model replies, tool results,
# manifests), as package:Target. `make fuzz` runs each for FUZZTIME; a
# failing input is saved under the package's testdata/fuzz and replayed by
# every later `go test`. FUZZTIME is a count of inputs, not a duration: with
# a duration, Go's fuzz coordinator reports "context deadline exceeded" as a
# failure when the deadline falls while a worker is minimizing an input,
# which made CI fail at random. Minimizing is bounded the same way.
FUZZ_TARGETS = ./internal/loop:FuzzCanonical ./internal/loop:FuzzCanonicalNumber ./internal/loop:FuzzDecodeArgs \
	./internal/loop:FuzzStep ./internal/localrun:FuzzParseManifest ./api/v1alpha1:FuzzParseApprovalAnswer
FUZZTIME ?= 2000x
FUZZMINIMIZE ?= 50x

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME inputs (2000x; FUZZTIME=10m make fuzz for a longer search).
	for t in $(FUZZ_TARGETS); do \
		go test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE) "$${t%%:*}"; \
	done

.PHONY: console-screenshots
console-screenshots: ## Take docs/console.md's screenshots again: the console over make demo's samples, in Chromium (hack/chromium-deps.sh).
	assets="$${KUBEBUILDER_ASSETS:-$$(hack/envtest-bins.sh)}"; \
	KUBEBUILDER_ASSETS="$$assets" CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console go test -count=1 -run 'TestDemo_everySampleEndsAsItsManifestExpects' ./internal/devenv/

.PHONY: chart-test
chart-test: ## Test charts/agentrun with Helm built from Go modules: lint --strict and template with each value set in ci/, misspelled values refused.
	hack/chart-test.sh

.PHONY: bench
bench: ## Run the benchmarks: the engine's turn and loop detection, API writes per turn, heap per run, TTL.
	assets="$${KUBEBUILDER_ASSETS:-$$(hack/envtest-bins.sh)}"; \
	KUBEBUILDER_ASSETS="$$assets" go test -run '^$$' -bench . -benchmem -timeout 30m ./internal/loop/ ./internal/controller/

# `make scale` sizes; each is a flag of hack/scale (go run ./hack/scale -h).
SCALE_RUNS ?= 100
SCALE_TURNS ?= 10
SCALE_SLOW_RUNS ?= 200
SCALE_SLOW_TURNS ?= 5
SCALE_SLOW_LATENCY ?= 2s
SCALE_MEM_RUNS ?= 1000
SCALE_MEM_TURNS ?= 1
SCALE_WRITES ?= 1000
SCALE_FLAGS ?=

.PHONY: scale
scale: ## Measure the operator at scale on a local control plane (a few minutes; not part of test): turns/s against bare patches/s, slow-model time against ideal, heap per active run, API server CPU per status write.
	assets="$${KUBEBUILDER_ASSETS:-$$(hack/envtest-bins.sh)}"; \
	KUBEBUILDER_ASSETS="$$assets" go run ./hack/scale -runs $(SCALE_RUNS) -turns $(SCALE_TURNS) \
		-slow-runs $(SCALE_SLOW_RUNS) -slow-turns $(SCALE_SLOW_TURNS) -slow-latency $(SCALE_SLOW_LATENCY) \
		-mem-runs $(SCALE_MEM_RUNS) -mem-turns $(SCALE_MEM_TURNS) -writes $(SCALE_WRITES) $(SCALE_FLAGS)

.PHONY: verify
verify: manifests generate fmt vet lint ## Fail on stale generated files or formatting, an untidy go.mod, a vet or lint finding, or a package the README does not name.
	git diff --exit-code -- api config charts internal cmd hack test
	go mod tidy -diff
	cd hack/lint && go mod tidy -diff
	hack/verify-readme-packages.sh
	hack/release.sh check

##@ Run locally

.PHONY: dev
dev: ## Start etcd, kube-apiserver and the operator on this machine; writes .dev/kubeconfig; Ctrl-C stops.
	go run ./cmd/agentrun dev --kubeconfig .dev/kubeconfig

.PHONY: demo
demo: ## Apply config/samples to a fresh local control plane, print progress and outcomes, stop.
	go run ./cmd/agentrun demo --samples config/samples --kubeconfig .dev/kubeconfig

##@ Build

# VERSION is linked into the binaries (agentrun version, kubectl agentrun version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/agentrun/agentrun/internal/version.Version=$(VERSION)

.PHONY: build
build: ## Build the operator, the entrypoint, the agentrun CLI and the kubectl plugin into bin/.
	CGO_ENABLED=0 go build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/manager ./cmd/manager
	CGO_ENABLED=0 go build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/agentrun-entrypoint ./cmd/agentrun-entrypoint
	CGO_ENABLED=0 go build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/agentrun ./cmd/agentrun
	CGO_ENABLED=0 go build -buildvcs=auto -ldflags "$(LDFLAGS)" -o bin/kubectl-agentrun ./cmd/kubectl-agentrun

# RELEASE_URL is where the archives will be downloaded from; it goes into
# the krew manifest (dist/agentrun.yaml). The default is the tag's GitHub
# release.
RELEASE_URL ?= https://github.com/agentrun/agentrun/releases/download/$(VERSION)

.PHONY: release
release: ## Build a release into dist/ (make release VERSION=v0.2.0): archives for linux, darwin and windows, SBOMs, the chart, checksums.txt, the krew manifest; checked.
	VERSION="$(VERSION)" LDFLAGS="$(LDFLAGS)" RELEASE_URL="$(RELEASE_URL)" hack/release.sh

.PHONY: release-snapshot
release-snapshot: ## Build the same dist/ as v0.0.0-snapshot.<commit>, offline, to try a release (cross builds: minutes).
	hack/release.sh snapshot

.PHONY: release-check
release-check: ## Check the release configuration: LICENSE, the krew manifest with krew's validator, the workflow with actionlint (seconds; no cross build).
	hack/release.sh check

include hack/e2e.mk
