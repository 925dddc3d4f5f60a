package v1alpha1

import "k8s.io/apimachinery/pkg/runtime"

// OutputSpec asks for a typed final answer: one JSON object that validates
// against schema.
type OutputSpec struct {
	// schema is the JSON Schema (draft 2020-12 unless its $schema says
	// otherwise) of the final answer: an object schema (type: object) that
	// refers to nothing outside itself ($ref within it only). It is sent
	// with every model request, so it is bounded: at most 64 keywords at
	// its top level here, and when the run starts at most 16 KiB as
	// compact JSON and 32 levels of nesting. A schema the run cannot use
	// ends it Error with a reason that says why.
	// +required
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	Schema runtime.RawExtension `json:"schema"`
}
