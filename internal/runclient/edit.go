package runclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	jsonpatch "github.com/evanphx/json-patch/v5"
)

// EditPatch is the JSON merge patch of an approval with changes, made of
// patch (a JSON merge patch, "" for none) with each of sets (key=value,
// a top-level argument each) written over it. A value is typed as the
// tool's parameter schema (spec.tools[].parameters) types its key:
// integer, number, boolean or string (null for the value null, which
// removes the argument); where the schema says nothing, as the proposed
// value is typed; otherwise it is a string. It returns "" when there is
// nothing to change.
func EditPatch(run *v1alpha1.AgentRun, callID, patch string, sets []string) (string, error) {
	out := map[string]json.RawMessage{}
	if strings.TrimSpace(patch) != "" {
		if err := json.Unmarshal([]byte(patch), &out); err != nil || out == nil {
			return "", fmt.Errorf("--patch %s is not a JSON object: give a JSON merge patch such as '{\"amount_minor\":8240}'", patch)
		}
	}
	if len(sets) > 0 {
		types, proposed := paramTypes(run, callID)
		for _, s := range sets {
			key, value, ok := strings.Cut(s, "=")
			if !ok || key == "" {
				return "", fmt.Errorf("--set %s is not key=value: give the argument's name, =, and its new value (amount_minor=8240)", s)
			}
			raw, err := typedValue(key, value, types[key], proposed[key])
			if err != nil {
				return "", err
			}
			out[key] = raw
		}
	}
	if len(out) == 0 {
		return "", nil
	}
	// Keys in order: the patch reads the same every time.
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(out)) {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		var compact bytes.Buffer
		if err := json.Compact(&compact, out[k]); err != nil {
			return "", err
		}
		b.Write(compact.Bytes())
	}
	b.WriteByte('}')
	return b.String(), nil
}

// ArgumentsPatch is the JSON merge patch from the arguments of the call
// callID as status.pendingApprovals shows them to edited, the whole
// arguments a person approved in their place; "" when they are the same.
func ArgumentsPatch(run *v1alpha1.AgentRun, callID, edited string) (string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(edited), &obj); err != nil || obj == nil {
		return "", fmt.Errorf("the changed arguments are not a JSON object: %v", err)
	}
	for _, p := range run.Status.PendingApprovals {
		if p.CallID != callID {
			continue
		}
		var shown map[string]json.RawMessage
		if err := json.Unmarshal([]byte(p.Arguments), &shown); err != nil || shown == nil {
			return "", fmt.Errorf("the arguments of %s are not whole in status (cut past 16 KiB): change them with a JSON merge patch "+
				"(kubectl agentrun approve --patch) instead", callID)
		}
		patch, err := jsonpatch.CreateMergePatch([]byte(p.Arguments), []byte(edited))
		if err != nil {
			return "", err
		}
		if string(patch) == "{}" {
			return "", nil
		}
		return EditPatch(run, callID, string(patch), nil) // compact, keys in order
	}
	return "", fmt.Errorf("%s is not waiting for approval on %s/%s", callID, run.Namespace, run.Name)
}

// paramTypes are the JSON types the tool's parameter schema gives its
// top-level arguments, and the proposed arguments of the call, for the
// call callID waiting on run.
func paramTypes(run *v1alpha1.AgentRun, callID string) (map[string]string, map[string]json.RawMessage) {
	types := map[string]string{}
	var proposed map[string]json.RawMessage
	for _, p := range run.Status.PendingApprovals {
		if p.CallID != callID {
			continue
		}
		_ = json.Unmarshal([]byte(p.Arguments), &proposed) // a cut value types nothing
		for _, t := range run.Spec.Tools {
			if t.Name != p.Tool || t.Parameters == nil {
				continue
			}
			var schema struct {
				Properties map[string]struct {
					Type any `json:"type"`
				} `json:"properties"`
			}
			_ = json.Unmarshal(t.Parameters.Raw, &schema)
			for k, prop := range schema.Properties {
				switch ty := prop.Type.(type) {
				case string:
					types[k] = ty
				case []any: // ["integer","null"]: the first that is not null
					for _, x := range ty {
						if s, _ := x.(string); s != "" && s != "null" {
							types[k] = s
							break
						}
					}
				}
			}
		}
	}
	return types, proposed
}

// typedValue is value as JSON of the type schemaType names, or, without
// one, of the proposed value's type.
func typedValue(key, value, schemaType string, proposed json.RawMessage) (json.RawMessage, error) {
	if value == "null" {
		return json.RawMessage("null"), nil
	}
	ty, from := schemaType, "the tool's parameters say so"
	if ty == "" {
		ty, from = jsonType(proposed), "the proposed value is one"
	}
	bad := func(what string) error {
		return fmt.Errorf("--set %s=%s: %s is %s (%s), and %q is not one", key, value, key, what, from, value)
	}
	switch ty {
	case "integer":
		if _, err := strconv.ParseInt(value, 10, 64); err != nil {
			return nil, bad("an integer")
		}
		return json.RawMessage(value), nil
	case "number":
		f, err := strconv.ParseFloat(value, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || !json.Valid([]byte(value)) {
			return nil, bad("a number")
		}
		return json.RawMessage(value), nil
	case "boolean":
		b, err := strconv.ParseBool(value)
		if err != nil {
			return nil, bad("a boolean (true or false)")
		}
		return json.Marshal(b)
	case "object", "array":
		var v any
		if err := json.Unmarshal([]byte(value), &v); err != nil {
			return nil, bad("an " + ty + " (give it as JSON, or use --patch)")
		}
		return json.RawMessage(value), nil
	}
	return json.Marshal(value)
}

// jsonType is the JSON Schema type name of a JSON value; "" when it is
// not one.
func jsonType(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil {
		return ""
	}
	switch v.(type) {
	case float64:
		if bytes.ContainsAny(raw, ".eE") {
			return "number"
		}
		return "integer"
	case bool:
		return "boolean"
	case string:
		return "string"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return ""
}
