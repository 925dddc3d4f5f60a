package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

const crd = `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
spec:
  versions:
  - name: v1alpha1
    schema:
      openAPIV3Schema:
        properties:
          spec:
            properties:
              goal:
                type: string
                x-kubernetes-validations:
                - message: a goal says something
                  rule: self.trim().size() > 0
              steps:
                items:
                  properties:
                    name:
                      type: string
                  x-kubernetes-validations:
                  - rule: has(self.name)
                type: array
              keyed:
                items:
                  properties:
                    name:
                      type: string
                  x-kubernetes-validations:
                  - rule: self.name != ''
                type: array
                x-kubernetes-list-map-keys: [name]
                x-kubernetes-list-type: map
            type: object
            x-kubernetes-validations:
            - rule: '!oldSelf.?cancel.orValue(false) || self.?cancel.orValue(false)'
          status:
            properties:
              turn:
                type: integer
                x-kubernetes-validations:
                - rule: self >= 0
            type: object
        type: object
`

// The spec's rules become creation-time rules, but those inside a list
// that is not a map list (they cannot read oldSelf) and those that read
// oldSelf already; status's rules stay; a second run changes nothing.
func TestGuardFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(path, []byte(crd), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := guardFile(path); err != nil {
		t.Fatal(err)
	}
	once, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(once, &got); err != nil {
		t.Fatal(err)
	}
	schema := dig(got, "spec", "versions").([]any)[0]
	rules := map[string][]any{}
	for path, keys := range map[string][]string{
		"goal":   {"properties", "spec", "properties", "goal"},
		"steps":  {"properties", "spec", "properties", "steps", "items"},
		"keyed":  {"properties", "spec", "properties", "keyed", "items"},
		"spec":   {"properties", "spec"},
		"status": {"properties", "status", "properties", "turn"},
	} {
		node, _ := dig(schema, append([]string{"schema", "openAPIV3Schema"}, keys...)...).(map[string]any)
		rules[path], _ = node["x-kubernetes-validations"].([]any)
	}
	want := map[string][]any{
		"goal":   {map[string]any{"message": "a goal says something", "rule": "oldSelf.hasValue() || (self.trim().size() > 0)", "optionalOldSelf": true}},
		"steps":  {map[string]any{"rule": "has(self.name)"}},
		"keyed":  {map[string]any{"rule": "oldSelf.hasValue() || (self.name != '')", "optionalOldSelf": true}},
		"spec":   {map[string]any{"rule": "!oldSelf.?cancel.orValue(false) || self.?cancel.orValue(false)"}},
		"status": {map[string]any{"rule": "self >= 0"}},
	}
	if d := cmp.Diff(want, rules); d != "" {
		t.Errorf("rules after crdguard (-want +got):\n%s", d)
	}
	if err := guardFile(path); err != nil {
		t.Fatal(err)
	}
	twice, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(once), string(twice)); d != "" {
		t.Errorf("a second run changed the file (-once +twice):\n%s", d)
	}
}
