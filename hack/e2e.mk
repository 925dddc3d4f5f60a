# End-to-end cluster: a real single-node Kubernetes on this machine (see hack/e2e/README.md).
# Included from the Makefile. Needs root (the kubelet and containerd run here).

# The Makefile includes this file; the guard lets `make -f Makefile -f hack/e2e.mk`
# read it twice without redefining every target.
ifndef AGENTRUN_E2E_MK
AGENTRUN_E2E_MK := 1

E2E_SCRIPTS := hack/e2e

.PHONY: e2e-bins e2e-images e2e-cluster e2e-cluster-down e2e-cluster-check e2e-smoke

e2e-bins: ## Build and cache the Kubernetes binaries for the e2e node (~10 min cold)
	EXTRA_CMDS="kubelet kube-controller-manager kube-scheduler kubectl" nice -n 15 hack/envtest-bins.sh

e2e-images: ## Build the pause and test-tools image tarballs (cached)
	$(E2E_SCRIPTS)/images.sh

e2e-cluster: ## Start the e2e cluster (idempotent); prints the admin kubeconfig's path
	$(E2E_SCRIPTS)/cluster-up.sh

e2e-cluster-down: ## Stop the e2e cluster and remove every trace of it, then check
	$(E2E_SCRIPTS)/cluster-down.sh

e2e-cluster-check: ## List what a stopped e2e cluster left behind (nothing, if clean)
	$(E2E_SCRIPTS)/cluster-down.sh --check

e2e-smoke: ## Smoke check of a running e2e cluster: Jobs really run in restricted pods
	$(E2E_SCRIPTS)/smoke.sh

##@ End-to-end tests

# Helm, built from helm.sh/helm/v3 by `go tool` from its own module
# (hack/tools), so Helm's dependencies stay out of the operator's go.mod.
HELM ?= go tool -modfile=hack/tools/go.mod helm
# helm template renders for this Kubernetes version (the chart needs 1.36+;
# without a cluster helm assumes an old default).
CHART_KUBE_VERSION ?= 1.37.2
E2E_OPERATOR_IMAGE ?= agentrun.local/operator:e2e
E2E_OPERATOR_TAR ?= bin/e2e/operator.tar
# kubectl of the e2e node's version, as `kubectl annotate` in the scenarios.
E2E_K8S_BIN ?= $(shell bash -c 'source $(E2E_SCRIPTS)/lib.sh && echo $$E2E_BIN')
# Extra go test flags, e.g. E2E_TEST_ARGS='-run Approval'.
E2E_TEST_ARGS ?=

.PHONY: chart-lint e2e-operator-image e2e-deploy e2e-test e2e

chart-lint: ## The chart's tests (hack/chart-test.sh: helm lint --strict, helm template with each value set, refused misspellings)
	hack/chart-test.sh

e2e-operator-image: ## Build the operator's image tarball as the Dockerfile lays it out, without a container engine
	go run ./hack/e2e/operator-image -o $(E2E_OPERATOR_TAR) -t $(E2E_OPERATOR_IMAGE)

e2e-deploy: e2e-cluster e2e-operator-image chart-lint ## Load the operator's image into the e2e node and helm install the chart (fresh)
	E2E_OPERATOR_IMAGE=$(E2E_OPERATOR_IMAGE) $(E2E_SCRIPTS)/deploy.sh $(E2E_OPERATOR_TAR)

# The test binary is built as the image's binaries are (CGO_ENABLED=0,
# -trimpath), so it reuses their compiled packages; so does test/e2e/dockerfile's
# check that every go build line of the Dockerfile compiles from the builder's
# context (too slow for make test: it links every binary with those flags).
e2e-test: ## Run the e2e scenarios (test/e2e, build tag e2e) against the running e2e cluster
	E2E_KUBECONFIG=$(CURDIR)/.e2e/kubeconfig E2E_KUBECTL=$(E2E_K8S_BIN)/kubectl CGO_ENABLED=0 \
	  go test -trimpath -tags e2e -count=1 -timeout 20m -v $(E2E_TEST_ARGS) ./test/e2e/ ./test/e2e/dockerfile/

e2e: e2e-deploy ## Start the e2e cluster, build and install the operator from its chart, run the scenarios
	$(MAKE) --no-print-directory e2e-test

endif # AGENTRUN_E2E_MK
