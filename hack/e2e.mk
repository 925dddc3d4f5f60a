# End-to-end cluster: a real single-node Kubernetes on this machine (see hack/e2e/README.md).
# Included from the Makefile. Needs root (the kubelet and containerd run here).

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
