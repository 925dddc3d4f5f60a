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

{{- define "agentrun.labels" -}}
helm.sh/chart: {{ include "agentrun.chart" . }}
{{ include "agentrun.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentrun
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
