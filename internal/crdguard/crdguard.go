// Package crdguard makes the CEL rules of a CRD's spec creation-time
// rules, and reads them back: the one home of the wrapping that
// hack/crdguard applies to the AgentRun CRD (make manifests), that
// hack/scale undoes to measure what it saves, and that test/crd checks.
//
// A wrapped rule is `oldSelf.hasValue() || (rule)` with optionalOldSelf:
// the API server checks it when the object is created and skips it on
// every later write, the status subresource's included. An AgentRun's
// spec cannot change after creation (the admission policy agentrun-spec),
// so re-checking it at each status write only cost CPU (docs/scale.md).
package crdguard

import "strings"

// prefix starts every wrapped rule.
const prefix = "oldSelf.hasValue() || ("

// Guard wraps the rules of the schema s and of every node below it that
// can read oldSelf, and returns how many it wrapped. A rule inside a list
// that is not a map list (x-kubernetes-list-type: map) cannot read
// oldSelf, nor a map's values, so they are left as they are; so are rules
// that read oldSelf already, which makes Guard idempotent.
func Guard(s map[string]any) int {
	n := 0
	if rules, ok := s["x-kubernetes-validations"].([]any); ok {
		for _, r := range rules {
			rule, _ := r.(map[string]any)
			text, _ := rule["rule"].(string)
			if rule == nil || strings.Contains(text, "oldSelf") {
				continue
			}
			rule["rule"] = prefix + text + ")"
			rule["optionalOldSelf"] = true
			n++
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for _, p := range props {
			if p, ok := p.(map[string]any); ok {
				n += Guard(p)
			}
		}
	}
	if items, ok := s["items"].(map[string]any); ok && s["x-kubernetes-list-type"] == "map" {
		n += Guard(items)
	}
	return n
}

// Unwrapped returns the rule as written before Guard wrapped it, and
// whether Guard had.
func Unwrapped(rule string) (string, bool) {
	if !strings.HasPrefix(rule, prefix) || !strings.HasSuffix(rule, ")") {
		return rule, false
	}
	return strings.TrimSuffix(strings.TrimPrefix(rule, prefix), ")"), true
}

// Unguard undoes Guard on one rule (an x-kubernetes-validations entry).
func Unguard(rule map[string]any) {
	text, _ := rule["rule"].(string)
	if orig, ok := Unwrapped(text); ok && rule["optionalOldSelf"] == true {
		rule["rule"] = orig
		delete(rule, "optionalOldSelf")
	}
}
