package kit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/job"
)

const placedManifest = `
metadata: {name: r}
spec:
  goal: Look up.
  model: {provider: scripted, script: [{toolCalls: [{name: lookup, arguments: {}}]}, {content: done}]}
  budget: {maxTurns: 3}
  serviceAccountName: billing-agent
  tools:
  - name: lookup
    job:
      image: busybox
      command: [sh, -c, 'echo "token=$TOKEN mode=$MODE"']
      env:
      - {name: TOKEN, valueFrom: {secretKeyRef: {name: billing, key: token}}}
      - {name: MODE, value: fast}
      pod:
        nodeSelector: {pool: tools}
        tolerations: [{key: dedicated, operator: Equal, value: tools, effect: NoSchedule}]
        labels: {team: billing}
        annotations: {owner: billing@example.com}
        resources: {limits: {memory: 256Mi}}
        runtimeClassName: gvisor
`

// The manifest's Secret stays a reference for the kubelet, and the pod's
// fields reach the executor.
func TestJobTool_keepsSecretsAsReferencesAndCarriesThePod(t *testing.T) {
	run := parse(t, placedManifest)
	got := jobTool(&run.Spec.Tools[0], false)
	want := []corev1.EnvVar{
		{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "billing"}, Key: "token"}}},
		{Name: "MODE", Value: "fast"},
	}
	if diff := cmp.Diff(want, got.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	wantPod := job.Pod{
		NodeSelector:     map[string]string{"pool": "tools"},
		Tolerations:      []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tools", Effect: corev1.TaintEffectNoSchedule}},
		Labels:           map[string]string{"team": "billing"},
		Annotations:      map[string]string{"owner": "billing@example.com"},
		RuntimeClassName: ptr.To("gvisor"),
	}
	if diff := cmp.Diff(wantPod, got.Pod); diff != "" {
		t.Errorf("pod (-want +got):\n%s", diff)
	}
	if q := got.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("pod.resources did not reach the container: %v", got.Resources)
	}
}

// A run whose account may not get the Secret does not start: the kubelet
// would read it for the pod whatever the account may do.
func TestBuild_jobEnvSecretsAreCheckedAsTheRunsAccount(t *testing.T) {
	run := parse(t, placedManifest)
	var asked []string
	b := &Builder{
		Jobs: job.Config{OperatorImage: "op"},
		CheckSecret: func(_ context.Context, ns, sa, name string) error {
			asked = append(asked, ns+"/"+sa+"/"+name)
			return fmt.Errorf("%w: no", ErrSecretForbidden)
		},
	}
	_, err := b.Build(context.Background(), run, egress.Grant{})
	if !errors.Is(err, ErrSecretForbidden) || !strings.Contains(err.Error(), "tools[0] (lookup) env TOKEN") {
		t.Errorf("Build = %v, want a refusal naming the env var", err)
	}
	if diff := cmp.Diff([]string{"default/billing-agent/billing"}, asked); diff != "" {
		t.Errorf("asked (-want +got):\n%s", diff)
	}
}

// Run as a local process, there is no kubelet: the value is read as the
// run's account would read it.
func TestBuild_localJobToolsReadTheirSecrets(t *testing.T) {
	run := parse(t, placedManifest)
	b := &Builder{LocalJobs: true, SecretsAs: func(sa string) SecretReader {
		return func(_ context.Context, ns, name, key string) (string, error) {
			if ns != "default" || sa != "billing-agent" || name != "billing" || key != "token" {
				return "", fmt.Errorf("unexpected read of %s/%s key %s as %s", ns, name, key, sa)
			}
			return "s3cr3t", nil
		}
	}}
	k, err := b.Build(context.Background(), run, egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	s := &loop.State{}
	(&loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools}).Run(context.Background(), s)
	if s.Outcome != loop.Completed {
		t.Fatalf("outcome %s: %s", s.Outcome, s.Reason)
	}
	if obs := strings.TrimSpace(s.Transcript[1].Content); obs != "token=s3cr3t mode=fast" {
		t.Errorf("observation = %q", obs)
	}
}
