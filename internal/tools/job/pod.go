package job

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/internal/telemetry"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// EnvTraceParent carries the W3C traceparent of the tool call's span, so
// that the spans a tool makes itself join the run's trace.
const EnvTraceParent = "TRACEPARENT"

// Bounds of Pod, the same as the CRD's.
const (
	maxNodeSelector = 16
	maxTolerations  = 16
	maxPodLabels    = 32
	maxAnnotations  = 32
)

// checkPod refuses what a manifest may not set of a tool's pod. The CRD
// refuses the same; this holds for manifests that never met the API
// server (agentrun local, tests) and keeps the executor's labels, by
// which it finds its Jobs and its NetworkPolicy selects their pods, its
// own.
func checkPod(tool string, p Pod) error {
	var errs []string
	if n := len(p.NodeSelector); n > maxNodeSelector {
		errs = append(errs, fmt.Sprintf("pod.nodeSelector has %d entries, at most %d are allowed", n, maxNodeSelector))
	}
	if n := len(p.Tolerations); n > maxTolerations {
		errs = append(errs, fmt.Sprintf("pod.tolerations has %d entries, at most %d are allowed", n, maxTolerations))
	}
	if n := len(p.Labels); n > maxPodLabels {
		errs = append(errs, fmt.Sprintf("pod.labels has %d entries, at most %d are allowed", n, maxPodLabels))
	}
	if n := len(p.Annotations); n > maxAnnotations {
		errs = append(errs, fmt.Sprintf("pod.annotations has %d entries, at most %d are allowed", n, maxAnnotations))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Labels)) {
		switch {
		case reservedKey(k) || k == LabelManagedBy:
			errs = append(errs, fmt.Sprintf("pod.labels %s is the operator's to set", k))
		case len(validation.IsQualifiedName(k)) > 0:
			errs = append(errs, fmt.Sprintf("pod.labels %q is not a valid label key", k))
		case len(validation.IsValidLabelValue(p.Labels[k])) > 0:
			errs = append(errs, fmt.Sprintf("pod.labels %s has a value that is not a valid label value", k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(p.Annotations)) {
		switch {
		case reservedKey(k):
			errs = append(errs, fmt.Sprintf("pod.annotations %s is the operator's to set", k))
		case securityAnnotation(k):
			errs = append(errs, fmt.Sprintf("pod.annotations %s would change the pod's security, which is the operator's restricted context", k))
		case len(validation.IsQualifiedName(k)) > 0:
			errs = append(errs, fmt.Sprintf("pod.annotations %q is not a valid annotation key", k))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("job executor: tool %q: %s", tool, strings.Join(errs, "; "))
	}
	return nil
}

// reservedKey is a label or annotation key under one of the operator's
// prefixes (agents.agentrun.dev/, sharding.agents.agentrun.dev/ ...).
func reservedKey(k string) bool { return strings.Contains(k, "agentrun.dev/") }

// securityAnnotation is an AppArmor or seccomp annotation, which Pod
// Security's restricted profile reads.
func securityAnnotation(k string) bool {
	return strings.Contains(k, "security.alpha.kubernetes.io/") || strings.Contains(k, "security.beta.kubernetes.io/")
}

// checkEnv refuses environment variables a tool may not have: only
// literal values and keys of Secrets (read by the kubelet for the pod).
func checkEnv(tool string, env []corev1.EnvVar) error {
	for _, v := range env {
		if v.ValueFrom == nil {
			continue
		}
		ref := secretRef(v)
		switch {
		case ref == nil:
			return fmt.Errorf("job executor: tool %q: env %s: only a Secret's key (secretKeyRef) may give a value", tool, v.Name)
		case v.Value != "":
			return fmt.Errorf("job executor: tool %q: env %s sets both a value and a Secret", tool, v.Name)
		case ref.Name == "" || ref.Key == "":
			return fmt.Errorf("job executor: tool %q: env %s: its secretKeyRef needs a name and a key", tool, v.Name)
		}
	}
	return nil
}

// secretRef is the Secret key an environment variable is read from, or
// nil for a literal value.
func secretRef(v corev1.EnvVar) *corev1.SecretKeySelector {
	if v.ValueFrom == nil || v.ValueFrom.SecretKeyRef == nil || v.ValueFrom.FieldRef != nil ||
		v.ValueFrom.ResourceFieldRef != nil || v.ValueFrom.ConfigMapKeyRef != nil || v.ValueFrom.FileKeyRef != nil {
		return nil
	}
	return v.ValueFrom.SecretKeyRef
}

// traceParent is the W3C traceparent of the span ctx carries (the tool
// call's), or "" when it carries none.
func traceParent(ctx context.Context) string { return telemetry.TraceParentOf(ctx) }
