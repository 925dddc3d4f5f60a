package platform

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
)

// Issue 44, item 4: AgentRunPolicy listed the five ceilings by hand, in its
// type, here and in the platform's admission policy. Every row of the
// engine's table of ceilings (loop.Ceilings) must be a limit of the same
// JSON name and type as the budget's field, checked by the admission
// policy, lowered by Apply and shown in docs/api.md's AgentRunPolicy; and
// a limit is a row or one of the timeouts below.
func TestLimits_areTheTableOfCeilings(t *testing.T) {
	timeouts := map[string]bool{"maxApprovalTimeout": true, "maxToolTimeout": true}
	budget, caps := jsonFields(reflect.TypeFor[v1alpha1.BudgetSpec]()), jsonFields(reflect.TypeFor[v1alpha1.PlatformLimits]())
	raw, err := os.ReadFile("../../config/admission/platform-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(raw), "\n---\n")
	var vap admissionregistrationv1.ValidatingAdmissionPolicy
	if err := yaml.UnmarshalStrict([]byte(first), &vap); err != nil || vap.Kind != "ValidatingAdmissionPolicy" {
		t.Fatalf("config/admission/platform-policy.yaml does not start with a ValidatingAdmissionPolicy (%v)", err)
	}
	// checks reports whether a validation holds budget.f to limits.f and
	// says so in its message.
	checks := func(f string) bool {
		for _, v := range vap.Spec.Validations {
			if strings.Contains(v.Expression, "object.spec.budget."+f) && strings.Contains(v.Expression, "variables.limits."+f) &&
				strings.Contains(v.MessageExpression, "spec.budget."+f) {
				return true
			}
		}
		return false
	}
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, manifest, _ := strings.Cut(string(doc), "\nkind: AgentRunPolicy\n")
	_, manifest, _ = strings.Cut(manifest, "\n  limits:")
	manifest, _, _ = strings.Cut(manifest, "\n  readOnlyTools:")
	rows := map[string]bool{}
	for _, row := range loop.Ceilings() {
		rows[row.Field] = true
		t.Run(string(row.Dim), func(t *testing.T) {
			if !checks(row.Field) {
				t.Errorf("the platform's admission policy (config/admission/platform-policy.yaml) has no validation that holds budget.%s to limits.%s", row.Field, row.Field)
			}
			if !strings.Contains(manifest, "\n    "+row.Field+":") {
				t.Errorf("docs/api.md's AgentRunPolicy manifest does not show limits.%s", row.Field)
			}
			b, inBudget := budget[row.Field]
			if !inBudget {
				t.Errorf("spec.budget has no %s", row.Field)
			}
			c, inCaps := caps[row.Field]
			if !inCaps {
				t.Errorf("AgentRunPolicy limits has no %s: a platform cannot cap the %s ceiling", row.Field, row.Dim)
			}
			if !inBudget || !inCaps {
				return
			}
			if deref(b) != deref(c) {
				t.Errorf("limits.%s is a %s, budget.%s a %s", row.Field, c, row.Field, b)
			}
			// Apply lowers a budget of 7 units to a limit of 5.
			seven, five := amounts(t, row.Unit)
			r := run(func(s *v1alpha1.AgentRunSpec) { setField(t, &s.Budget, row.Field, seven) })
			l := &v1alpha1.PlatformLimits{}
			setField(t, l, row.Field, five)
			got, _, err := Apply(r, []v1alpha1.AgentRunPolicy{policy("p", func(s *v1alpha1.AgentRunPolicySpec) { s.Limits = l })})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := limitOf(t, row, &got.Spec.Budget), limitOf(t, row, budgetWith(t, row.Field, five)); g != w {
				t.Errorf("Apply left budget.%s at %d, want the limit %d", row.Field, g, w)
			}
		})
	}
	for name := range caps {
		if !rows[name] && !timeouts[name] {
			t.Errorf("AgentRunPolicy limits.%s is neither a row of loop.Ceilings nor a known timeout", name)
		}
	}
}

// jsonFields maps a struct's JSON field names to their Go types.
func jsonFields(ty reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range ty.NumField() {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("json"), ",")
		out[name] = ty.Field(i).Type
	}
	return out
}

func deref(t reflect.Type) reflect.Type {
	if t.Kind() == reflect.Pointer {
		return t.Elem()
	}
	return t
}

// amounts are 7 and 5 of a unit, as JSON.
func amounts(t *testing.T, u loop.Unit) (seven, five string) {
	switch u {
	case loop.UnitCount:
		return "7", "5"
	case loop.UnitDuration:
		return `"7s"`, `"5s"`
	case loop.UnitUSD:
		return `"7"`, `"5"`
	}
	t.Fatalf("unit %q has no amounts", u)
	return "", ""
}

// setField sets a JSON field of obj (a struct pointer) to the JSON value v.
func setField(t *testing.T, obj any, field, v string) {
	t.Helper()
	if err := json.Unmarshal([]byte(`{"`+field+`":`+v+`}`), obj); err != nil {
		t.Fatal(err)
	}
}

func budgetWith(t *testing.T, field, v string) *v1alpha1.BudgetSpec {
	b := &v1alpha1.BudgetSpec{MaxTurns: 1}
	setField(t, b, field, v)
	return b
}

func limitOf(t *testing.T, row loop.Ceiling, b *v1alpha1.BudgetSpec) int64 {
	t.Helper()
	lb, err := limits.Budget(b)
	if err != nil {
		t.Fatal(err)
	}
	return row.Limit(&lb)
}
