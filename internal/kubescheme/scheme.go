// Package kubescheme holds the one runtime.Scheme every AgentRun binary and
// test uses: the built-in Kubernetes kinds and AgentRun.
package kubescheme

import (
	"github.com/agentrun/agentrun/api/v1alpha1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// Scheme knows the built-in kinds (Pods, Secrets, Events, ...) and AgentRun.
// It is filled once, at start-up; treat it as read-only.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()
