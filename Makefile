# AgentRun: an operator that runs LLM agents as Kubernetes resources.
# Tools run through `go tool` (pinned in go.mod); nothing is downloaded at build time.

# Binaries for envtest (kube-apiserver, etcd), built once from Go modules and cached.
# Deferred (?=) so the script only runs for targets that need it, and a
# KUBEBUILDER_ASSETS from the environment wins.
KUBEBUILDER_ASSETS ?= $(shell hack/envtest-bins.sh)

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
	$(CONTROLLER_GEN) rbac:roleName=agentrun-manager paths="./internal/controller/..." output:rbac:artifacts:config=config/rbac
	mkdir -p $(CHART_CRDS)
	cp $(CRD_BASES)/*.yaml $(CHART_CRDS)/

.PHONY: generate
generate: ## Generate DeepCopy methods for the API types.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: test
test: manifests generate fmt vet ## Run every test that needs no real cluster (envtest included).
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" go test ./...
