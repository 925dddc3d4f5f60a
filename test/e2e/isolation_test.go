//go:build e2e

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/tools/job"
)

// A job tool's pod runs under the NetworkPolicy the operator made for it
// (installed from the chart with its defaults), with default resources
// and an ephemeral-storage limit. The e2e node's CNI (the bridge plugin)
// does not enforce NetworkPolicy, so this checks that the policy exists,
// selects the tool's pod and allows only DNS and the declared egress; it
// cannot show a packet being dropped.
func TestIsolation_toolPodHasItsNetworkPolicyAndBoundedResources(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "e2e-iso")
	createRun(t, ns, "confined", `
spec:
  goal: "Look it up."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: lookup, arguments: {q: x}}]
    - content: "Done."
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    timeout: 60s
    job:
      image: {{.Image}}
      command: [/testtool]
      args: [cat]
      egress: [{cidr: 192.0.2.0/24, ports: [{port: 8443}]}]
`)
	run := waitFinished(t, ns, "confined", v1alpha1.OutcomeCompleted)
	j := onlyJob(t, run, "t1-c1")

	var np networkingv1.NetworkPolicy
	key := client.ObjectKey{Namespace: ns, Name: job.NetworkPolicyName(string(run.UID), "lookup")}
	if err := cl.Get(context.Background(), key, &np); err != nil {
		t.Fatalf("the tool's NetworkPolicy %s: %v", key, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || !sel.Matches(labels.Set(j.Spec.Template.Labels)) {
		t.Errorf("the policy's selector %v does not select the tool's pod %v (%v)", sel, j.Spec.Template.Labels, err)
	}
	if len(np.Spec.PolicyTypes) != 2 || len(np.Spec.Ingress) != 0 {
		t.Errorf("policy types %v, ingress %v; want Ingress and Egress with no ingress allowed", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
	if len(np.Spec.Egress) != 2 || np.Spec.Egress[1].To[0].IPBlock == nil || np.Spec.Egress[1].To[0].IPBlock.CIDR != "192.0.2.0/24" ||
		np.Spec.Egress[1].Ports[0].Port.IntValue() != 8443 {
		t.Errorf("egress = %+v; want DNS and 192.0.2.0/24:8443 only", np.Spec.Egress)
	}
	res := j.Spec.Template.Spec.Containers[0].Resources
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if _, ok := res.Limits[n]; !ok {
			t.Errorf("the tool container has no %s limit: %+v", n, res)
		}
		if _, ok := res.Requests[n]; !ok {
			t.Errorf("the tool container has no %s request: %+v", n, res)
		}
	}
}
