// Command crdguard makes the CEL rules of a CRD's spec creation-time
// rules: each rule that can see the object's earlier value becomes
// `oldSelf.hasValue() || (rule)` with optionalOldSelf, so that the API
// server checks it when the object is created and skips it on every later
// write. `make manifests` runs it on the AgentRun CRD after controller-gen.
//
// Why: the API server evaluates every rule of a CRD on every write of the
// object, the status subresource included, and an AgentRun's status is
// written several times in its life while its spec never changes (the
// admission policy agentrun-spec, config/admission/run-spec.yaml, keeps it
// so). Re-checking a spec that cannot have changed was about a third of
// the API server's CPU per status write (docs/scale.md). The spec types
// are shared with AgentRunTemplate, whose spec may change, so the markers
// stay as they are and only the AgentRun CRD is rewritten.
//
// Which rules it wraps, and how, is package internal/crdguard.
//
// Usage: crdguard FILE...
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/agentrun/agentrun/internal/crdguard"
	"sigs.k8s.io/yaml"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crdguard FILE...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		if err := guardFile(f); err != nil {
			fmt.Fprintf(os.Stderr, "crdguard: %s: %v\n", f, err)
			os.Exit(1)
		}
	}
}

func guardFile(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		return err
	}
	versions, _ := dig(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("no spec.versions: not a CustomResourceDefinition")
	}
	n := 0
	for _, v := range versions {
		spec, _ := dig(v, "schema", "openAPIV3Schema", "properties", "spec").(map[string]any)
		if spec == nil {
			return fmt.Errorf("a version has no spec in its schema")
		}
		n += crdguard.Guard(spec)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	if bytes.HasPrefix(raw, []byte("---\n")) {
		out = append([]byte("---\n"), out...)
	}
	fmt.Printf("crdguard: %s: %d rules checked on create only\n", path, n)
	return os.WriteFile(path, out, 0o644)
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
