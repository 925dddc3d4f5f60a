package job

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func resources(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

// A tool that asks for 64 CPUs and 512Gi of memory is refused, naming each
// resource over its cap, rather than clamped.
func TestNew_refusesAToolAskingMoreThanTheCaps(t *testing.T) {
	f := newFixture(t)
	greedy := refundTool()
	greedy.Resources = corev1.ResourceRequirements{Requests: resources("cpu", "64", "memory", "512Gi")}
	_, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{greedy})
	if err == nil {
		t.Fatal("New accepted a tool asking for 64 CPUs and 512Gi")
	}
	for _, want := range []string{`tool "issue_refund" asks for more than the operator allows (--tool-max-resources)`,
		"resources.requests.cpu 64 is more than the 4", "resources.requests.memory 512Gi is more than the 8Gi",
		"resources.limits.cpu 64 is more than the 4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// What a tool leaves out takes the defaults; a default request is lowered
// to the tool's own lower limit; /tmp is bounded by the ephemeral-storage
// limit; and the pod is admitted by the API server.
func TestStart_fillsInDefaultResourcesAndAnEphemeralStorageLimit(t *testing.T) {
	f := newFixture(t)
	small := refundTool()
	small.Resources = corev1.ResourceRequirements{Limits: resources("cpu", "50m")}
	ex, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{small})
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation("t1-c1")
	if err := ex.Start(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	pod := f.job(inv).Spec.Template.Spec
	want := corev1.ResourceRequirements{
		Requests: resources("cpu", "50m", "memory", "128Mi", "ephemeral-storage", "64Mi"),
		Limits:   resources("cpu", "50m", "memory", "512Mi", "ephemeral-storage", "1Gi"),
	}
	if diff := cmp.Diff(want, pod.Containers[0].Resources); diff != "" {
		t.Errorf("tool container resources (-want +got):\n%s", diff)
	}
	for _, v := range pod.Volumes {
		if v.Name == tmpVolume && (v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.String() != "1Gi") {
			t.Errorf("/tmp size limit = %v, want 1Gi", v.EmptyDir.SizeLimit)
		}
	}
}

// Before a tool's first Job, the executor creates a NetworkPolicy owned by
// the run that selects exactly that tool's pods: no ingress, egress to
// kube-dns on port 53 and to the tool's own rules, nothing else.
func TestStart_confinesTheToolsPodsWithANetworkPolicy(t *testing.T) {
	f := newFixture(t)
	tool := refundTool()
	tool.Egress = []EgressRule{{CIDR: "203.0.113.7/32", Ports: []Port{{Port: 443}}}, {CIDR: "10.0.0.0/8"}}
	other := refundTool()
	other.Name = "send_email"
	ex, err := New(Config{Client: k8sClient, OperatorImage: operatorImage}, f.run, []Tool{tool, other})
	if err != nil {
		t.Fatal(err)
	}
	inv := invocation("t1-c1")
	if err := ex.Start(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(context.Background(), inv); err != nil {
		t.Fatalf("a second Start (the policy exists): %v", err)
	}
	var np networkingv1.NetworkPolicy
	key := client.ObjectKey{Namespace: f.ns, Name: NetworkPolicyName(string(f.run.Owner.UID), "issue_refund")}
	if err := k8sClient.Get(context.Background(), key, &np); err != nil {
		t.Fatalf("the tool's NetworkPolicy: %v", err)
	}
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].UID != f.run.Owner.UID {
		t.Errorf("owners = %+v, want the run", np.OwnerReferences)
	}
	if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes); diff != "" {
		t.Errorf("policy types (-want +got):\n%s", diff)
	}
	if len(np.Spec.Ingress) != 0 {
		t.Errorf("ingress = %+v, want none allowed", np.Spec.Ingress)
	}
	tcp, udp, dns, https := corev1.ProtocolTCP, corev1.ProtocolUDP, intstr.FromInt32(53), intstr.FromInt32(443)
	wantEgress := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: np.Spec.Egress[0].To[0].NamespaceSelector, PodSelector: np.Spec.Egress[0].To[0].PodSelector}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "203.0.113.7/32"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(tcp), Port: &https}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}},
	}
	if diff := cmp.Diff(wantEgress, np.Spec.Egress); diff != "" {
		t.Errorf("egress (-want +got):\n%s", diff)
	}
	if to := np.Spec.Egress[0].To[0]; to.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "kube-system" ||
		to.PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("DNS peer = %+v, want kube-dns in kube-system", to)
	}

	// The selector picks this tool's pods of this run, and no other tool's.
	sel, err := metav1LabelSelector(np)
	if err != nil {
		t.Fatal(err)
	}
	if podLabels := labels.Set(f.job(inv).Spec.Template.Labels); !sel.Matches(podLabels) {
		t.Errorf("the policy's selector %s does not select the tool's pod %v", sel, podLabels)
	}
	otherJob := ex.buildJob(ex.tools["send_email"], invocation("t1-c2"), "")
	if sel.Matches(labels.Set(otherJob.Spec.Template.Labels)) {
		t.Errorf("the policy's selector %s also selects another tool's pod", sel)
	}
}

// With NoNetworkPolicy (--tool-network-policy=false) no policy is made.
func TestStart_noNetworkPolicyWhenTurnedOff(t *testing.T) {
	f := newFixture(t)
	ex, err := New(Config{Client: k8sClient, OperatorImage: operatorImage, NoNetworkPolicy: true}, f.run, []Tool{refundTool()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(context.Background(), invocation("t1-c1")); err != nil {
		t.Fatal(err)
	}
	var list networkingv1.NetworkPolicyList
	if err := k8sClient.List(context.Background(), &list, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("policies = %d, want none", len(list.Items))
	}
}

func TestParseResourceList(t *testing.T) {
	got, err := ParseResourceList(" cpu=500m, memory=1Gi ,ephemeral-storage=2Gi")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(resources("cpu", "500m", "memory", "1Gi", "ephemeral-storage", "2Gi"), got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"cpu", "cpu=lots"} {
		if _, err := ParseResourceList(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func metav1LabelSelector(np networkingv1.NetworkPolicy) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
}
