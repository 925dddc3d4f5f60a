# The AgentRun operator's image: /manager (the operator), /agentrun-entrypoint
# (the wrapper every tool Job's init container copies into the tool's pod; see
# internal/tools/job, DefaultEntrypointPath) and /kubectl-agentrun (the plugin).
#
#   docker build -t ghcr.io/agentrun/agentrun:0.1.0 .
#
# Kept simple on purpose: the e2e cluster builds the same layout without a
# container engine (hack/e2e/operator-image), reading the go build lines, the
# COPY --from lines, USER and ENTRYPOINT from this file, and
# test/e2e/dockerfile checks that every go build line compiles from the files
# the builder stage copies in.

FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS=linux
ARG TARGETARCH
ENV CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH}
WORKDIR /workspace

# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
# The generated CRDs, embedded where a manifest is checked without an API
# server (an evaluation's cases from a ConfigMap, agentrun local).
COPY config/crd/ config/crd/

RUN go build -trimpath -ldflags=-s -o /out/manager ./cmd/manager
RUN go build -trimpath -ldflags=-s -o /out/agentrun-entrypoint ./cmd/agentrun-entrypoint
RUN go build -trimpath -ldflags=-s -o /out/kubectl-agentrun ./cmd/kubectl-agentrun

FROM gcr.io/distroless/static:nonroot
COPY --from=builder /out/manager /manager
COPY --from=builder /out/agentrun-entrypoint /agentrun-entrypoint
COPY --from=builder /out/kubectl-agentrun /kubectl-agentrun
USER 65532:65532
ENTRYPOINT ["/manager"]
