package job

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
)

// Resources are what the operator allows tool pods: defaults for what a
// manifest leaves out, and caps no manifest may pass.
type Resources struct {
	// Requests and Limits fill in what a tool's resources leave out.
	Requests, Limits corev1.ResourceList
	// Max caps every request and limit a tool's container may have, its
	// own or the defaults. A tool over a cap is refused (New fails), not
	// clamped: a tool given less than it asked for would fail later and
	// less clearly.
	Max corev1.ResourceList
}

// Defaults of Resources: a tool pod gets a modest share of a node and at
// most a few CPUs, some memory and a bounded scratch disk.
var (
	DefaultRequests = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("100m"),
		corev1.ResourceMemory:           resource.MustParse("128Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("64Mi"),
	}
	DefaultLimits = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("1"),
		corev1.ResourceMemory:           resource.MustParse("512Mi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
	}
	DefaultMax = corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("4"),
		corev1.ResourceMemory:           resource.MustParse("8Gi"),
		corev1.ResourceEphemeralStorage: resource.MustParse("10Gi"),
	}
)

// ParseResourceList reads "cpu=100m,memory=128Mi" (a flag's value).
func ParseResourceList(s string) (corev1.ResourceList, error) {
	out := corev1.ResourceList{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want name=quantity, such as cpu=500m", part)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out[corev1.ResourceName(strings.TrimSpace(name))] = q
	}
	return out, nil
}

// resourcesFor fills in a tool's requests and limits from the defaults,
// then refuses any over a cap. A default request is lowered to the tool's
// own limit, and a default limit raised to the tool's own request, so the
// pod stays valid.
func (r Resources) resourcesFor(tool string, own corev1.ResourceRequirements) (corev1.ResourceRequirements, error) {
	out := *own.DeepCopy()
	if out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	if out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	for name, q := range r.Limits {
		if _, ok := out.Limits[name]; !ok {
			if req, ok := out.Requests[name]; ok && req.Cmp(q) > 0 {
				q = req
			}
			out.Limits[name] = q
		}
	}
	for name, q := range r.Requests {
		if _, ok := out.Requests[name]; !ok {
			if lim, ok := out.Limits[name]; ok && lim.Cmp(q) < 0 {
				q = lim
			}
			out.Requests[name] = q
		}
	}
	var errs []string
	for _, kind := range []struct {
		name string
		list corev1.ResourceList
	}{{"limits", out.Limits}, {"requests", out.Requests}} {
		names := make([]string, 0, len(kind.list))
		for n := range kind.list {
			names = append(names, string(n))
		}
		slices.Sort(names)
		for _, n := range names {
			q, ceiling := kind.list[corev1.ResourceName(n)], r.Max[corev1.ResourceName(n)]
			if _, capped := r.Max[corev1.ResourceName(n)]; capped && q.Cmp(ceiling) > 0 {
				errs = append(errs, fmt.Sprintf("resources.%s.%s %s is more than the %s tool pods may have", kind.name, n, q.String(), ceiling.String()))
			}
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("job executor: tool %q asks for more than the operator allows (--tool-max-resources): %s",
			tool, strings.Join(errs, "; "))
	}
	return out, nil
}

// EgressRule allows a tool's pod to reach an IP block, on some ports or
// all of them.
type EgressRule struct {
	CIDR  string
	Ports []Port
}

// Port is a destination port and its protocol (TCP when empty).
type Port struct {
	Port     int32
	Protocol corev1.Protocol
}

// LabelPolicy marks the NetworkPolicies the executor makes.
const LabelPolicy = "agents.agentrun.dev/tool-egress"

// NetworkPolicyName is the name of the NetworkPolicy of one tool of a run.
func NetworkPolicyName(runUID string, tool string) string {
	uid := strings.ToLower(strings.ReplaceAll(runUID, "-", ""))
	if len(uid) > 8 {
		uid = uid[:8]
	}
	prefix := "ar-" + uid + "-egress-"
	clean := strings.Trim(clip.Head(dns1123(tool), validation.DNS1123LabelMaxLength-len(prefix)-9), "-")
	if clean == "" {
		return prefix + shortHash(tool)
	}
	return prefix + clean + "-" + shortHash(tool)
}

// networkPolicy is the policy of one tool's pods: no ingress, and egress
// only to the cluster's DNS (kube-dns in kube-system, port 53) and the
// tool's egress rules.
func (e *Executor) networkPolicy(tool *Tool) *networkingv1.NetworkPolicy {
	owner := e.run.Owner
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	egress := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}},
	}}
	for _, r := range tool.Egress {
		rule := networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: r.CIDR}}}}
		for _, p := range r.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			rule.Ports = append(rule.Ports, networkingv1.NetworkPolicyPort{Protocol: ptr.To(proto), Port: ptr.To(intstr.FromInt32(p.Port))})
		}
		egress = append(egress, rule)
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      NetworkPolicyName(string(owner.UID), tool.Name),
			Namespace: e.run.Namespace,
			Labels: map[string]string{
				LabelRun: labelValue(owner.Name), LabelRunUID: labelValue(string(owner.UID)),
				LabelTool: labelValue(tool.Name), LabelManagedBy: "agentrun", LabelPolicy: "true",
			},
			Annotations:     map[string]string{AnnotationTool: tool.Name},
			OwnerReferences: []metav1.OwnerReference{owner},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				LabelRunUID: labelValue(string(owner.UID)),
				LabelTool:   labelValue(tool.Name),
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Egress:      egress,
		},
	}
}

// ensureNetworkPolicy creates the tool's NetworkPolicy unless it exists.
// The manifest cannot change, so an existing one is the same.
func (e *Executor) ensureNetworkPolicy(ctx context.Context, tool *Tool) error {
	if e.cfg.NoNetworkPolicy {
		return nil
	}
	np := e.networkPolicy(tool)
	err := e.cfg.Client.Create(ctx, np)
	switch {
	case err == nil, apierrors.IsAlreadyExists(err):
		return nil
	case apierrors.IsInvalid(err), apierrors.IsForbidden(err), apierrors.IsBadRequest(err):
		return &CallError{Failure: loop.Failure{Kind: loop.FailUnavailable, Detail: loop.ClipDetail(fmt.Sprintf(
			"the NetworkPolicy %s that confines tool %q could not be created, so its Job was not: %v", np.Name, tool.Name, err))}}
	}
	return fmt.Errorf("creating NetworkPolicy %s/%s: %w", np.Namespace, np.Name, err)
}
