// Package crdcheck validates a custom resource the way kube-apiserver does
// on create, without one: defaults from the CRD's schema are applied, then
// the OpenAPI schema, the list-type invariants and the x-kubernetes-validations
// CEL rules are checked, with the libraries the API server itself uses.
// `agentrun local` uses it so that a manifest that runs locally also
// applies to a cluster, and fails with the same message when it would not.
package crdcheck

import (
	"context"
	"fmt"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// Validator checks objects of one version of one CRD.
type Validator struct {
	kind       string
	apiVersion string
	structural *schema.Structural
	schema     validation.SchemaValidator
	cel        *cel.Validator // nil when the schema has no CEL rules
}

// New reads a CustomResourceDefinition (YAML or JSON) and prepares the
// validator of its version named version.
func New(crdYAML []byte, version string) (*Validator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(crdYAML, crd); err != nil {
		return nil, fmt.Errorf("reading the CRD: %w", err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != version {
			continue
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			return nil, fmt.Errorf("CRD %s version %s has no schema", crd.Name, version)
		}
		internal := &apiextensionsinternal.CustomResourceValidation{}
		if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, version, err)
		}
		structural, err := schema.NewStructural(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("CRD %s version %s: the schema is not structural: %w", crd.Name, version, err)
		}
		sv, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			return nil, fmt.Errorf("CRD %s version %s: %w", crd.Name, version, err)
		}
		return &Validator{
			kind:       crd.Spec.Names.Kind,
			apiVersion: crd.Spec.Group + "/" + version,
			structural: structural,
			schema:     sv,
			cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
		}, nil
	}
	return nil, fmt.Errorf("CRD %s has no version %q", crd.Name, version)
}

// Create applies the schema's defaults to obj (a decoded JSON object, with
// integers as int64 as k8s.io/apimachinery/pkg/util/json decodes them) and
// returns what the API server would refuse it for on create, in the API
// server's words. Fields the schema does not know are the caller's to
// refuse: the API server prunes them or, under strict field validation,
// refuses them before it validates.
func (v *Validator) Create(ctx context.Context, obj map[string]any) field.ErrorList {
	if obj["kind"] != v.kind || obj["apiVersion"] != v.apiVersion {
		return field.ErrorList{field.Invalid(field.NewPath("kind"), obj["kind"], fmt.Sprintf("must be %s %s", v.apiVersion, v.kind))}
	}
	defaulting.Default(obj, v.structural)
	errs := validation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if v.cel == nil {
		return errs
	}
	// Like the API server, CEL rules run only on an object that passed the
	// checks they rely on (types, required fields, sizes, enums).
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil,
				"some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}
