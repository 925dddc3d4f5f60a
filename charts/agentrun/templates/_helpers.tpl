{{/* The chart's name. */}}
{{- define "agentrun.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, used for every object. */}}
{{- define "agentrun.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agentrun.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentrun.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentrun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
A shard's operator pods (values: shards): their own component, so the
unsharded Deployment's selector (which cannot change) never matches them.
Called with a dict: root, shard.
*/}}
{{- define "agentrun.shardSelectorLabels" -}}
app.kubernetes.io/name: {{ include "agentrun.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: operator-shard
agents.agentrun.dev/shard: {{ .shard }}
{{- end }}

{{/* Every operator pod of the release, unsharded and shards' (metrics, NetworkPolicy). */}}
{{- define "agentrun.podSelectorLabels" -}}
app.kubernetes.io/name: {{ include "agentrun.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "agentrun.commonLabels" -}}
helm.sh/chart: {{ include "agentrun.chart" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentrun
{{- end }}

{{- define "agentrun.labels" -}}
{{ include "agentrun.selectorLabels" . }}
{{ include "agentrun.commonLabels" . }}
{{- end }}

{{- define "agentrun.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "agentrun.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image reference. */}}
{{- define "agentrun.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The image tool Jobs install agentrun-entrypoint from: the operator's own unless set. */}}
{{- define "agentrun.operatorImage" -}}
{{- default (include "agentrun.image" .) .Values.operatorImage }}
{{- end }}

{{/* "true" when the operator elects a leader: asked for, or more than one replica. */}}
{{- define "agentrun.leaderElect" -}}
{{- if or .Values.leaderElection.enabled (gt (int .Values.replicas) 1) }}true{{ else }}false{{ end }}
{{- end }}

{{/* "true" when any of the release's Deployments (unsharded or a shard's) elects a leader. */}}
{{- define "agentrun.anyLeaderElect" -}}
{{- $any := eq (include "agentrun.leaderElect" .) "true" }}
{{- range .Values.shards }}
{{- if or $.Values.leaderElection.enabled (gt (int (ternary .replicas $.Values.replicas (hasKey . "replicas"))) 1) }}
{{- $any = true }}
{{- end }}
{{- end }}
{{- if $any }}true{{ else }}false{{ end }}
{{- end }}

{{/*
A resource list as a flag's value: cpu=100m,memory=128Mi (keys sorted).
*/}}
{{- define "agentrun.resourceList" -}}
{{- $parts := list -}}
{{- range $name, $q := . -}}
{{- $parts = append $parts (printf "%s=%v" $name $q) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end }}

{{/* The metrics port's name: https-metrics when served over HTTPS. */}}
{{- define "agentrun.metricsPortName" -}}
{{- if .Values.metrics.secure }}https-metrics{{ else }}http-metrics{{ end }}
{{- end }}

{{/*
"true" when the chart installs the MutatingAdmissionPolicies that stamp who
approved a call and who created a run: asked for (approvals.recordIdentity)
and served by the cluster (admissionregistration.k8s.io/v1, Kubernetes
1.36+). Where it is not, the operator applies answers without a stamp
(--accept-unstamped-answers): see docs/api.md, "Clusters before 1.36".
*/}}
{{- define "agentrun.recordsIdentity" -}}
{{- $caps := .Capabilities.APIVersions }}
{{- $served := false }}
{{- if $caps.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" }}
{{- /* The API server's discovery (helm install, or --api-versions): it lists the kinds it serves. */}}
{{- $served = $caps.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}
{{- else }}
{{- /* helm template without a cluster lists no kinds: go by the version, as served by default. */}}
{{- $served = semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version }}
{{- end }}
{{- if and .Values.approvals.recordIdentity.enabled $served }}true{{ else }}false{{ end }}
{{- end }}
