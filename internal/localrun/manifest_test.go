package localrun

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// minimalRun is the smallest valid AgentRun; cases below edit it.
const minimalRun = `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: r}
spec:
  goal: "Do it."
  model: {provider: scripted, script: [{content: done}]}
  budget: {maxTurns: 3}
  tools:
  - {name: echo, job: {image: busybox, command: [cat]}}
`

func TestParseManifest_readsSecretsAndSkipsEmptyDocuments(t *testing.T) {
	m, err := ParseManifest(strings.NewReader(`# a comment-only document
---
apiVersion: v1
kind: Secret
metadata: {name: api, namespace: prod}
data: {key: c2stbG9jYWw=}       # sk-local
stringData: {other: plain}
---
` + minimalRun + `---
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"api": {"key": "sk-local", "other": "plain"}}
	if d := cmp.Diff(want, m.Secrets); d != "" {
		t.Errorf("secrets (-want +got):\n%s", d)
	}
	if m.Run.Name != "r" || len(m.Run.Spec.Tools) != 1 {
		t.Errorf("run = %s with %d tools, want r with 1", m.Run.Name, len(m.Run.Spec.Tools))
	}
	read := m.SecretReader()
	if v, err := read(context.Background(), "default", "api", "key"); err != nil || v != "sk-local" {
		t.Errorf("api/key = %q, %v", v, err)
	}
	if _, err := read(context.Background(), "default", "api", "nope"); err == nil || !strings.Contains(err.Error(), `Secret "api" has no key "nope"`) {
		t.Errorf("a missing key: %v", err)
	}
}

func TestParseManifest_readsConfigMapsTextAndBinary(t *testing.T) {
	m, err := ParseManifest(strings.NewReader(`apiVersion: v1
kind: ConfigMap
metadata: {name: ca}
data: {ca.crt: pem}
binaryData: {raw: YmluYXJ5}      # binary
---
` + minimalRun))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"ca": {"ca.crt": "pem", "raw": "binary"}}
	if d := cmp.Diff(want, m.ConfigMaps); d != "" {
		t.Errorf("config maps (-want +got):\n%s", d)
	}
	read := m.ConfigMapReader()
	if v, err := read(context.Background(), "default", "ca", "raw"); err != nil || v != "binary" {
		t.Errorf("ca/raw = %q, %v", v, err)
	}
	if _, err := read(context.Background(), "default", "other", "raw"); err == nil || !strings.Contains(err.Error(), `no ConfigMap "other" in the manifest file`) {
		t.Errorf("a missing ConfigMap: %v", err)
	}
}

// newChecker is one Checker for a test's cases: building one compiles the
// CRD.
func newChecker(t *testing.T) *Checker {
	t.Helper()
	c, err := NewChecker()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseManifest_rejectsWhatTheAPIServerWould(t *testing.T) {
	check := newChecker(t)
	for _, tc := range []struct {
		name     string
		manifest string
		want     string
	}{
		{"no AgentRun", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n", "the file holds no AgentRun"},
		{"another kind", minimalRun + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n",
			`document 2 (Deployment "web"): apiVersion "apps/v1" kind "Deployment" is not read here`},
		{"another version", strings.Replace(minimalRun, "v1alpha1", "v1beta1", 1), `document 1 (AgentRun "r")`},
		{"two AgentRuns", minimalRun + "---\n" + minimalRun, `document 2 (AgentRun "r"): the file holds a second AgentRun`},
		{"not YAML", "kind: [AgentRun\n", "document 1"},
		{"a Secret without a name", "apiVersion: v1\nkind: Secret\nmetadata: {}\n---\n" + minimalRun, `document 1 (Secret ""): metadata.name is required`},
		{"two Secrets of one name", "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: b}\n---\n" + minimalRun,
			`document 2 (Secret "s"): a second Secret of this name (namespaces are ignored locally)`},
		{"a ConfigMap without a name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n---\n" + minimalRun, `document 1 (ConfigMap ""): metadata.name is required`},
		{"two ConfigMaps of one name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + minimalRun,
			`document 2 (ConfigMap "c"): a second ConfigMap of this name (namespaces are ignored locally)`},
		{"a Secret with a field it does not have", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nvalues: {a: b}\n---\n" + minimalRun, `document 1 (Secret "s"): json: unknown field "values"`},
		{"unknown field", strings.Replace(minimalRun, "goal:", "gaol: x\n  goal:", 1), `unknown field "gaol"`},
		{"empty goal", strings.Replace(minimalRun, `"Do it."`, `"  "`, 1), "goal must not be empty"},
		{"no name", strings.Replace(minimalRun, "metadata: {name: r}", "metadata: {}", 1), "metadata.name: Required value"},
		// These two ran locally while the API server refused them, when
		// the local checks were a hand-written copy of the CRD's.
		{"too many turns", strings.Replace(minimalRun, "maxTurns: 3", "maxTurns: 20000", 1), "spec.budget.maxTurns: Invalid value: 20000"},
		{"an unknown soft dimension", strings.Replace(minimalRun, "maxTurns: 3", "maxTurns: 3, soft: [money]", 1), `spec.budget.soft[0]: Unsupported value: "money"`},
		{"a CEL rule across fields", minimalRun + "  policy: {grants: [nothing]}\n", "nothing"},
		{"zero turns", strings.Replace(minimalRun, "maxTurns: 3", "maxTurns: 0", 1), "budget.maxTurns must be at least 1"},
		{"two executors", strings.Replace(minimalRun, "command: [cat]}", "command: [cat]}, builtin: kubernetes.get", 1),
			"tool echo sets more than one executor"},
		{"no executor", strings.Replace(minimalRun, ", job: {image: busybox, command: [cat]}", "", 1), "tool echo has no executor"},
		{"duplicate tool", minimalRun + "  - {name: echo, job: {image: busybox, command: [cat]}}\n", "tool names must be unique: echo is declared more than once"},
		{"bad tool name", strings.Replace(minimalRun, "name: echo", "name: echo tool", 1), `spec.tools[0].name: Invalid value: "echo tool"`},
		{"job without image", strings.Replace(minimalRun, "image: busybox, ", "", 1), "spec.tools[0].job.image: Required value"},
		{"scripted without script", strings.Replace(minimalRun, ", script: [{content: done}]", "", 1), "spec.model.script: Required value: provider scripted needs model.script"},
		{"unknown provider", strings.Replace(minimalRun, "provider: scripted", "provider: llama", 1), `spec.model.provider: Unsupported value: "llama"`},
		{"openai without name, key, cost", strings.Replace(minimalRun, "{provider: scripted, script: [{content: done}]}", "{provider: openai}", 1),
			"spec.model.name: Required value"},
		{"perTool names an unknown tool", strings.Replace(minimalRun, "maxTurns: 3", "maxTurns: 3, perTool: {search: 1}", 1),
			"budget.perTool names a tool that is not declared in spec.tools: search"},
		{"a follow-up", minimalRun + "  continueFrom: {name: earlier}\n", "spec.continueFrom continues AgentRun earlier of a cluster, whose conversation agentrun local cannot read"},
		{"rule names an unknown tool", minimalRun + "  policy: {rules: [{tools: [refund], decision: ask}]}\n", "policy.rules name a tool that is not declared in spec.tools (\"*\" means every tool)"},
		{"missing API key Secret", strings.NewReplacer("{provider: scripted, script: [{content: done}]}",
			"{provider: openai, name: gpt, apiKeySecretRef: {name: openai, key: api-key}}", "maxTurns: 3", `maxTurns: 3, maxCostUSD: "1"`).Replace(minimalRun),
			`model.apiKeySecretRef: no Secret "openai" in the manifest file`},
		{"missing header Secret key", "apiVersion: v1\nkind: Secret\nmetadata: {name: tok}\nstringData: {a: b}\n---\n" +
			strings.Replace(minimalRun, "job: {image: busybox, command: [cat]}",
				"http: {url: 'http://x/', headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: tok, key: token}}}]}", 1),
			`tools[0] (echo) header Authorization: Secret "tok" has no key "token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := check.ParseManifest(strings.NewReader(tc.manifest))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

const investigatorTemplate = `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: investigator}
spec:
  parameters:
  - {name: ticket, required: true, pattern: '^T-[0-9]+$'}
  run:
    goal: "Investigate $(params.ticket)."
    model: {provider: scripted, script: [{content: "Looked at $(params.ticket)."}]}
    budget: {maxTurns: 3}
`

func TestParseManifest_resolvesARunFromATemplateInTheFile(t *testing.T) {
	check := newChecker(t)
	run := "apiVersion: agents.agentrun.dev/v1alpha1\nkind: AgentRun\nmetadata: {name: t-7}\n" +
		"spec:\n  templateRef: {name: investigator}\n  parameters: [{name: ticket, value: T-7}]\n"
	m, err := ParseManifest(strings.NewReader(investigatorTemplate + "---\n" + run))
	if err != nil {
		t.Fatal(err)
	}
	spec := m.Run.Spec
	if spec.Goal != "Investigate T-7." || spec.Model.Script[0].Content != "Looked at T-7." || spec.TemplateRef == nil {
		t.Errorf("resolved spec: goal %q, script %+v, templateRef %v", spec.Goal, spec.Model.Script, spec.TemplateRef)
	}
	if spec.LoopDetection == nil || spec.Model.Timeout == nil {
		t.Error("the CRD's defaults were not applied to the resolved spec")
	}

	for _, tc := range []struct{ name, doc, want string }{
		{"no template", run, `spec.templateRef names the AgentRunTemplate "investigator", which is not in the file`},
		{"bad value", investigatorTemplate + "---\n" + strings.Replace(run, "value: T-7", "value: X-7", 1), `parameter "ticket" must match the pattern ^T-[0-9]+$, and "X-7" does not`},
	} {
		_, err := check.ParseManifest(strings.NewReader(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want it to say %q", tc.name, err, tc.want)
		}
	}
}

func TestParseManifest_aTemplateThatMakesAnInvalidRunIsRefusedAsTheAPIServerWould(t *testing.T) {
	tpl := strings.Replace(strings.Replace(investigatorTemplate, "Investigate $(params.ticket).", "$(params.ticket)", 1),
		"required: true, pattern: '^T-[0-9]+$'", "required: true", 1)
	run := "apiVersion: agents.agentrun.dev/v1alpha1\nkind: AgentRun\nmetadata: {name: t-7}\n" +
		"spec:\n  templateRef: {name: investigator}\n  parameters: [{name: ticket, value: '   '}]\n"
	_, err := ParseManifest(strings.NewReader(tpl + "---\n" + run))
	if err == nil || !strings.Contains(err.Error(), "does not make a valid run") || !strings.Contains(err.Error(), "goal must not be empty") {
		t.Errorf("err = %v", err)
	}
}

// A caller that makes runs itself (agentrun eval) reads the templates
// with ReadDocuments, letting another kind through, then checks and
// resolves each run with WithRun as ParseManifest would; the manifest it
// started from is left as it was.
func TestWithRun_resolvesARunMadeInCodeAgainstTheTemplatesRead(t *testing.T) {
	check := newChecker(t)
	m := NewManifest()
	var others []string
	err := check.ReadDocuments(strings.NewReader(investigatorTemplate+"---\napiVersion: example.com/v1\nkind: Report\nmetadata: {name: x}\n"), m,
		func(tm metav1.TypeMeta, _ []byte) (bool, error) {
			others = append(others, tm.Kind)
			return tm.Kind == "Report", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"AgentRunTemplate", "Report"}, others); diff != "" {
		t.Errorf("documents offered to other (-want +got):\n%s", diff)
	}
	run := func(ticket string) *v1alpha1.AgentRun {
		return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Name: "ev-c-1", Labels: map[string]string{v1alpha1.LabelCase: "c"}},
			Spec: v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: "investigator"},
				Parameters: []v1alpha1.ParameterValue{{Name: "ticket", Value: ticket}}}}
	}
	got, err := check.WithRun(m, run("T-7"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Run.Spec.Goal != "Investigate T-7." || got.Run.Labels[v1alpha1.LabelCase] != "c" || got.Run.Spec.LoopDetection == nil || m.Run != nil {
		t.Errorf("WithRun: goal %q, labels %v, defaults applied %t; the manifest's own run %v",
			got.Run.Spec.Goal, got.Run.Labels, got.Run.Spec.LoopDetection != nil, m.Run)
	}
	if _, err := check.WithRun(m, run("X-7")); err == nil || !strings.Contains(err.Error(), `AgentRun "ev-c-1": parameter "ticket" must match`) {
		t.Errorf("a value the template refuses: err = %v", err)
	}
}
