package crd_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// An AgentRunPolicy is cluster-scoped; a mistake in one is refused with a
// message that names the field.
func TestAgentRunPolicy_rejectsInvalidManifests(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		wantErr    []string
	}{
		{"a price that is not a decimal", `pricing: [{model: "*", input: "1e3"}]`, []string{"spec.pricing[0].input", "decimal string"}},
		{"a wall clock that is not a duration", `limits: {maxWallClock: forever}`, []string{"limits.maxWallClock must be a positive duration"}},
		{"self-approval neither Allow nor Deny", `approval: {selfApproval: Sometimes}`, []string{"spec.approval.selfApproval", "Allow", "Deny"}},
		{"a key allowed with no provider", `models: [{apiKeySecret: shared, providers: []}]`, []string{"spec.models[0].providers"}},
		{"a key listed twice", `models: [{apiKeySecret: shared, providers: [openai]}, {apiKeySecret: shared, providers: [anthropic]}]`,
			[]string{"Duplicate value", "shared"}},
		{"a required rule with an unknown decision", `rules: [{tools: ["*"], decision: maybe}]`, []string{"spec.rules[0].decision"}},
		{"a tool kind that does not exist", `readOnlyTools: [{kinds: [shell]}]`, []string{"spec.readOnlyTools[0].kinds[0]", "http", "builtin"}},
		{"a rule matching an HTTP method there is no tool for", `rules: [{tools: ["*"], decision: ask, match: [{methods: [TRACE]}]}]`,
			[]string{"spec.rules[0].match[0].methods[0]"}},
		{"an egress entry that is a name", `egress: {allowCIDRs: [10.96.0.0/12, db.internal]}`,
			[]string{"spec.egress.allowCIDRs[1]", "egress.allowCIDRs entries must be a CIDR such as 10.96.0.0/12 or an IP address such as 192.0.2.7"}},
		{"an egress prefix too long", `egress: {allowCIDRs: [10.0.0.0/33]}`, []string{"spec.egress.allowCIDRs[0]", "must be a CIDR"}},
		{"egress entries joined by a comma", `egress: {allowCIDRs: ["10.0.0.0/8,192.168.0.0/16"]}`, []string{"spec.egress.allowCIDRs[0]", "must be a CIDR"}},
		{"an egress entry listed twice", `egress: {allowCIDRs: [192.0.2.7, 192.0.2.7]}`, []string{"spec.egress.allowCIDRs[1]", "Duplicate value"}},
		{"more than 64 egress entries", `egress: {allowCIDRs: [` + strings.Repeat("192.0.2.7, ", 64) + `192.0.2.8]}`,
			[]string{"spec.egress.allowCIDRs", "must have at most 64 items"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			manifest := "apiVersion: agents.agentrun.dev/v1alpha1\nkind: AgentRunPolicy\nmetadata: {name: invalid}\nspec:\n  " + tc.spec + "\n"
			if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
				t.Fatal(err)
			}
			err := k8sClient.Create(testContext(t), obj, client.DryRunAll)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// Issue 46 item 6: a policy's notify rules name outcomes of the enum, at
// least one, and pick runs by a selector the API server can read; a
// mistake is refused with a message that says what to write.
func TestAgentRunPolicy_notifyRules(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		wantErr    []string
	}{
		{"outcomes by label and by schedule",
			`notify: [{outcomes: [BudgetExhausted, ToolFailure, Error], runSelector: {matchLabels: {team: billing}, matchExpressions: [{key: tier, operator: In, values: [gold]}, {key: example.com/paged, operator: Exists}]}}, {outcomes: [Error], schedules: [nightly-reconcile]}]`, nil},
		{"every run of the namespaces", `notify: [{outcomes: [Error]}]`, nil},
		{"an outcome that does not exist", `notify: [{outcomes: [Failed]}]`,
			[]string{"spec.notify[0].outcomes[0]", "Unsupported value", "BudgetExhausted"}},
		{"no outcome", `notify: [{runSelector: {matchLabels: {team: billing}}, outcomes: []}]`,
			[]string{"spec.notify[0].outcomes", "name at least one outcome, such as BudgetExhausted, ToolFailure or Error"}},
		{"outcomes left out", `notify: [{schedules: [nightly]}]`, []string{"spec.notify[0].outcomes", "Required value"}},
		{"an outcome listed twice", `notify: [{outcomes: [Error, Error]}]`, []string{"spec.notify[0].outcomes[1]", "Duplicate value"}},
		{"an operator a selector does not have", `notify: [{outcomes: [Error], runSelector: {matchExpressions: [{key: team, operator: Equals, values: [billing]}]}}]`,
			[]string{"spec.notify[0].runSelector.matchExpressions[0].operator", "Unsupported value", `"In", "NotIn", "Exists", "DoesNotExist"`}},
		{"In without values", `notify: [{outcomes: [Error], runSelector: {matchExpressions: [{key: team, operator: In}]}}]`,
			[]string{"spec.notify[0].runSelector", "In and NotIn need values, Exists and DoesNotExist take none"}},
		{"Exists with values", `notify: [{outcomes: [Error], runSelector: {matchExpressions: [{key: team, operator: Exists, values: [billing]}]}}]`,
			[]string{"In and NotIn need values, Exists and DoesNotExist take none"}},
		{"a key that is no label key", `notify: [{outcomes: [Error], runSelector: {matchExpressions: [{key: "team billing", operator: Exists}]}}]`,
			[]string{"spec.notify[0].runSelector", "key must be a label key"}},
		{"a label value that is no label value", `notify: [{outcomes: [Error], runSelector: {matchLabels: {team: "billing/payments"}}}]`,
			[]string{"spec.notify[0].runSelector.matchLabels[team]", "a label value is at most 63 letters"}},
		{"a label key that is no label key", `notify: [{outcomes: [Error], runSelector: {matchLabels: {"team/billing/x": a}}}]`,
			[]string{"spec.notify[0].runSelector.matchLabels", "keys must be label keys"}},
		{"more than 16 rules", `notify: [` + strings.Repeat("{outcomes: [Error]}, ", 16) + `{outcomes: [Error]}]`,
			[]string{"spec.notify", "must have at most 16 items"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			manifest := "apiVersion: agents.agentrun.dev/v1alpha1\nkind: AgentRunPolicy\nmetadata: {name: notify}\nspec:\n  " + tc.spec + "\n"
			if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
				t.Fatal(err)
			}
			err := k8sClient.Create(testContext(t), obj, client.DryRunAll)
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("The API server rejected a valid policy: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("The API server accepted the policy; want an error saying %q", tc.wantErr)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
