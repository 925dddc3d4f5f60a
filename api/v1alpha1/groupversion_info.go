// Package v1alpha1 holds the AgentRun API: an LLM agent run as a Kubernetes
// resource. The package has types and markers only, and the codec of the
// approval annotation's value (approval.go); behaviour lives in internal/.
//
// +kubebuilder:object:generate=true
// +groupName=agents.agentrun.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the AgentRun resource.
	GroupVersion = schema.GroupVersion{Group: "agents.agentrun.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
