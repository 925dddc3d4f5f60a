package localrun

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Manifest is what a file given to agentrun local holds: one AgentRun and
// the Secrets its spec refers to.
type Manifest struct {
	Run *v1alpha1.AgentRun
	// Secrets are the file's Secrets by name, their values decoded:
	// stringData wins over data, as on the API server. Namespaces are
	// ignored: a local run and its Secrets all live in "default".
	Secrets map[string]map[string]string
}

// ReadManifest reads and validates a manifest file.
func ReadManifest(path string) (*Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseManifest(f)
}

// ParseManifest reads YAML or JSON documents: exactly one AgentRun
// (agents.agentrun.dev/v1alpha1) and any number of v1 Secrets. Anything
// else is an error that names the document. The AgentRun is checked the
// way the API server would check it, as far as that is cheap to do here;
// the loop engine checks the rest when the run is built.
func ParseManifest(r io.Reader) (*Manifest, error) {
	m := &Manifest{Secrets: map[string]map[string]string{}}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for n := 1; ; n++ {
		var doc json.RawMessage
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		doc = bytes.TrimSpace(doc)
		if len(doc) == 0 || bytes.Equal(doc, []byte("null")) {
			continue // an empty document, or one made only of comments
		}
		var tm struct {
			metav1.TypeMeta `json:",inline"`
			Metadata        struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("document %d: not an object: %w", n, err)
		}
		what := fmt.Sprintf("document %d (%s %q)", n, tm.Kind, tm.Metadata.Name)
		switch {
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "AgentRun":
			if m.Run != nil {
				return nil, fmt.Errorf("%s: the file holds a second AgentRun (%q came first); agentrun local runs one", what, m.Run.Name)
			}
			run := &v1alpha1.AgentRun{}
			if err := strict(doc, run); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if err := validate(run); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			m.Run = run
		case tm.APIVersion == "v1" && tm.Kind == "Secret":
			s := &corev1.Secret{}
			if err := strict(doc, s); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			if s.Name == "" {
				return nil, fmt.Errorf("%s: metadata.name is required", what)
			}
			if _, dup := m.Secrets[s.Name]; dup {
				return nil, fmt.Errorf("%s: a second Secret of this name (namespaces are ignored locally)", what)
			}
			values := map[string]string{}
			for k, v := range s.Data {
				values[k] = string(v)
			}
			for k, v := range s.StringData {
				values[k] = v
			}
			m.Secrets[s.Name] = values
		default:
			return nil, fmt.Errorf("%s: apiVersion %q kind %q is not read here; the file holds one AgentRun (%s) and v1 Secrets",
				what, tm.APIVersion, tm.Kind, v1alpha1.GroupVersion)
		}
	}
	if m.Run == nil {
		return nil, fmt.Errorf("the file holds no AgentRun (apiVersion %s, kind AgentRun)", v1alpha1.GroupVersion)
	}
	if err := m.checkSecretRefs(); err != nil {
		return nil, fmt.Errorf("AgentRun %q: %w", m.Run.Name, err)
	}
	return m, nil
}

// strict decodes one document (JSON by now) and refuses unknown fields,
// as kubectl's default strict field validation does.
func strict(doc []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// SecretReader resolves references against the file's Secrets.
func (m *Manifest) SecretReader() func(ctx context.Context, namespace, name, key string) (string, error) {
	return func(_ context.Context, _, name, key string) (string, error) {
		s, ok := m.Secrets[name]
		if !ok {
			return "", fmt.Errorf("no Secret %q in the manifest file", name)
		}
		v, ok := s[key]
		if !ok {
			return "", fmt.Errorf("Secret %q has no key %q", name, key)
		}
		return v, nil
	}
}

// checkSecretRefs fails early on a reference the file cannot satisfy. In a
// cluster the Secret could appear later; here nothing else can provide it.
func (m *Manifest) checkSecretRefs() error {
	check := func(field string, ref v1alpha1.SecretKeySelector) error {
		if _, err := m.SecretReader()(context.Background(), "", ref.Name, ref.Key); err != nil {
			return fmt.Errorf("%s: %w (add a v1 Secret document to the file)", field, err)
		}
		return nil
	}
	spec := &m.Run.Spec
	if ref := spec.Model.APIKeySecretRef; ref != nil && spec.Model.Provider != v1alpha1.ProviderScripted {
		if err := check("model.apiKeySecretRef", *ref); err != nil {
			return err
		}
	}
	for i, t := range spec.Tools {
		var hs []v1alpha1.HTTPHeader
		if t.HTTP != nil {
			hs = t.HTTP.Headers
		} else if t.MCP != nil {
			hs = t.MCP.Headers
		}
		for j, h := range hs {
			if h.ValueFrom != nil {
				if err := check(fmt.Sprintf("tools[%d] (%s) header %s", i, t.Name, hs[j].Name), h.ValueFrom.SecretKeyRef); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// validate repeats the API server's cheap checks (required fields, the
// one-executor union, unique tool names and names that refer to tools),
// so a manifest that runs here also applies to a cluster.
func validate(run *v1alpha1.AgentRun) error {
	var errs []string
	fail := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	spec := &run.Spec
	if run.Name == "" {
		fail("metadata.name is required")
	}
	if strings.TrimSpace(spec.Goal) == "" {
		fail("spec.goal is required")
	}
	if spec.Budget.MaxTurns < 1 {
		fail("spec.budget.maxTurns must be at least 1")
	}
	switch p := spec.Model.Provider; p {
	case v1alpha1.ProviderScripted:
		if len(spec.Model.Script) == 0 {
			fail("provider scripted needs spec.model.script: one entry per model call, in order")
		}
	case v1alpha1.ProviderOpenAI, v1alpha1.ProviderAnthropic:
		if spec.Model.Name == "" {
			fail("spec.model.name is required with provider %s", p)
		}
		if spec.Model.APIKeySecretRef == nil {
			fail("spec.model.apiKeySecretRef is required with provider %s", p)
		}
		if spec.Budget.MaxCostUSD == "" {
			fail("spec.budget.maxCostUSD is required with provider %s", p)
		}
		if len(spec.Model.Script) > 0 {
			fail("spec.model.script is only read by provider scripted")
		}
	default:
		fail("spec.model.provider must be scripted, openai or anthropic, not %q", p)
	}

	declared := map[string]bool{}
	for i, t := range spec.Tools {
		if !toolName.MatchString(t.Name) {
			fail("spec.tools[%d]: name %q must be 1 to 64 letters, digits, _ or -", i, t.Name)
		}
		if declared[t.Name] {
			fail("spec.tools[%d]: tool name %q is declared twice", i, t.Name)
		}
		declared[t.Name] = true
		n := 0
		for _, set := range []bool{t.HTTP != nil, t.Job != nil, t.MCP != nil, t.Builtin != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			fail("spec.tools[%d] (%s) sets %d executors: set exactly one of http, job, mcp or builtin", i, t.Name, n)
		}
		if t.Job != nil && t.Job.Image == "" {
			fail("spec.tools[%d] (%s): job.image is required (a cluster runs it; agentrun local runs job.command instead)", i, t.Name)
		}
	}
	undeclared := func(field string, names []string, wildcard bool) {
		for _, n := range names {
			if !declared[n] && !(wildcard && n == "*") {
				fail("%s names tool %q, which is not declared in spec.tools", field, n)
			}
		}
	}
	undeclared("spec.budget.perTool", slices.Sorted(maps.Keys(spec.Budget.PerTool)), false)
	if p := spec.Policy; p != nil {
		for i, r := range p.Rules {
			undeclared(fmt.Sprintf("spec.policy.rules[%d]", i), r.Tools, true)
		}
		undeclared("spec.policy.grants", p.Grants, false)
	}
	for i, g := range spec.Guardrails {
		undeclared(fmt.Sprintf("spec.guardrails[%d]", i), g.Tools, true)
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}
