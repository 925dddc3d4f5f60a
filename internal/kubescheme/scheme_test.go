package kubescheme

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestScheme_knowsBuiltInKindsAndAgentRun(t *testing.T) {
	for _, obj := range []runtime.Object{&corev1.Secret{}, &corev1.Event{}, &corev1.Pod{}, &v1alpha1.AgentRun{}} {
		if _, _, err := Scheme.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}
