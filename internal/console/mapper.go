package console

import (
	"github.com/agentrun/agentrun/api/v1alpha1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// mapper knows the few kinds the console reads, so that a user's client
// needs no discovery requests of its own (each in-cluster user has one).
var mapper = func() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, k := range []struct {
		gvk   schema.GroupVersionKind
		scope meta.RESTScope
	}{
		{v1alpha1.GroupVersion.WithKind("AgentRun"), meta.RESTScopeNamespace},
		{v1alpha1.GroupVersion.WithKind("AgentBudget"), meta.RESTScopeNamespace},
		{v1alpha1.GroupVersion.WithKind("AgentRunTemplate"), meta.RESTScopeNamespace},
		{v1alpha1.GroupVersion.WithKind("AgentEvaluation"), meta.RESTScopeNamespace},
		{v1alpha1.GroupVersion.WithKind("AgentSchedule"), meta.RESTScopeNamespace},
		{v1alpha1.GroupVersion.WithKind("AgentRunPolicy"), meta.RESTScopeRoot},
		{corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace},
		{corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace}, // the operator's public keys
		{corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot},
		{corev1.SchemeGroupVersion.WithKind("Event"), meta.RESTScopeNamespace},
		{authenticationv1.SchemeGroupVersion.WithKind("SelfSubjectReview"), meta.RESTScopeRoot},
		{authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview"), meta.RESTScopeRoot},
	} {
		m.Add(k.gvk, k.scope)
	}
	return m
}()
