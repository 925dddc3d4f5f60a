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
	"reflect"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/config/crd"
	"github.com/agentrun/agentrun/internal/crdcheck"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/template"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Manifest is what a file given to agentrun local holds: one AgentRun and
// the Secrets, ConfigMaps, AgentRunTemplates and MCPServers its spec
// refers to.
type Manifest struct {
	Run *v1alpha1.AgentRun
	// Secrets are the file's Secrets by name, their values decoded:
	// stringData wins over data, as on the API server. Namespaces are
	// ignored: a local run and its Secrets all live in "default".
	Secrets map[string]map[string]string
	// ConfigMaps are the file's ConfigMaps by name (data and binaryData),
	// for the CA bundles a run names; namespaces are ignored, as for
	// Secrets.
	ConfigMaps map[string]map[string]string
	// Templates are the file's AgentRunTemplates by name; a run that
	// names one (spec.templateRef) is resolved against them.
	Templates map[string]*v1alpha1.AgentRunTemplate
	// MCPServers are the file's MCPServers by name; a tool that names one
	// (mcp.serverRef) takes its settings, as in a cluster. Namespaces
	// are ignored, as for Secrets.
	MCPServers map[string]*v1alpha1.MCPServer
}

// Checker checks AgentRun documents as the API server checks them on
// create, with the CRD this binary embeds. Building one compiles the CRD's
// schema and CEL rules (about a tenth of a second); whoever checks many
// documents builds one and keeps it. It is safe for concurrent use.
type Checker struct {
	runs       *crdcheck.Validator
	mcpServers *crdcheck.Validator
}

// NewChecker compiles the embedded AgentRun and MCPServer CRDs.
func NewChecker() (*Checker, error) {
	v, err := crdcheck.New(crd.AgentRuns, v1alpha1.GroupVersion.Version)
	if err != nil {
		return nil, err
	}
	s, err := crdcheck.New(crd.MCPServers, v1alpha1.GroupVersion.Version)
	if err != nil {
		return nil, err
	}
	return &Checker{runs: v, mcpServers: s}, nil
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

// ParseManifest is Checker.ParseManifest with a Checker of its own, for
// one manifest (agentrun local reads one).
func ParseManifest(r io.Reader) (*Manifest, error) {
	c, err := NewChecker()
	if err != nil {
		return nil, err
	}
	return c.ParseManifest(r)
}

// ParseManifest reads YAML or JSON documents: exactly one AgentRun
// (agents.agentrun.dev/v1alpha1) and any number of v1 Secrets and
// ConfigMaps. Anything
// else is an error that names the document. The AgentRun is checked the
// way the API server would check it, as far as that is cheap to do here;
// the loop engine checks the rest when the run is built.
func (c *Checker) ParseManifest(r io.Reader) (*Manifest, error) {
	m := NewManifest()
	if err := c.ReadDocuments(r, m, nil); err != nil {
		return nil, err
	}
	if m.Run == nil {
		return nil, fmt.Errorf("the file holds no AgentRun (apiVersion %s, kind AgentRun)", v1alpha1.GroupVersion)
	}
	if err := c.complete(m); err != nil {
		return nil, err
	}
	return m, nil
}

// NewManifest is an empty manifest, for ReadDocuments.
func NewManifest() *Manifest {
	return &Manifest{Secrets: map[string]map[string]string{}, ConfigMaps: map[string]map[string]string{}, Templates: map[string]*v1alpha1.AgentRunTemplate{},
		MCPServers: map[string]*v1alpha1.MCPServer{}}
}

// Other reads a document of a kind a manifest does not hold (tm says
// which); handled is false for a kind it does not read either. It sees
// every document first, so it may also refuse one a manifest holds.
type Other func(tm metav1.TypeMeta, doc []byte) (handled bool, err error)

// ReadDocuments reads YAML or JSON documents from r into m, as
// ParseManifest does: at most one AgentRun, checked as the API server
// checks it, and AgentRunTemplates, MCPServers (checked as the API server
// checks them), v1 Secrets and v1 ConfigMaps, each named unlike those of
// its kind m holds already. other, when not nil,
// reads the documents of other kinds; a document nobody reads is an error
// that names it. The AgentRun is not resolved against its template yet.
func (c *Checker) ReadDocuments(r io.Reader, m *Manifest, other Other) error {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for n := 1; ; n++ {
		var doc json.RawMessage
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("document %d: %w", n, err)
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
			return fmt.Errorf("document %d: not an object: %w", n, err)
		}
		what := fmt.Sprintf("document %d (%s %q)", n, tm.Kind, tm.Metadata.Name)
		if other != nil {
			handled, err := other(tm.TypeMeta, doc)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if handled {
				continue
			}
		}
		switch {
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "AgentRun":
			if m.Run != nil {
				return fmt.Errorf("%s: the file holds a second AgentRun (%q came first); agentrun local runs one", what, m.Run.Name)
			}
			run, err := c.decodeRun(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			m.Run = run
		case tm.APIVersion == "v1" && tm.Kind == "Secret":
			s := &corev1.Secret{}
			if err := decodeNamed(doc, tm.Kind, s, m.Secrets); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			m.Secrets[s.Name] = merged(s.Data, s.StringData)
		case tm.APIVersion == "v1" && tm.Kind == "ConfigMap":
			cm := &corev1.ConfigMap{}
			if err := decodeNamed(doc, tm.Kind, cm, m.ConfigMaps); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			m.ConfigMaps[cm.Name] = merged(cm.BinaryData, cm.Data)
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "AgentRunTemplate":
			t := &v1alpha1.AgentRunTemplate{}
			if err := strict(doc, t); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if _, dup := m.Templates[t.Name]; dup || t.Name == "" {
				return fmt.Errorf("%s: every AgentRunTemplate needs a name of its own", what)
			}
			m.Templates[t.Name] = t
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "MCPServer":
			s, err := c.decodeMCPServer(doc)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			if _, dup := m.MCPServers[s.Name]; dup {
				return fmt.Errorf("%s: a second MCPServer of this name (namespaces are ignored locally)", what)
			}
			m.MCPServers[s.Name] = s
		default:
			return fmt.Errorf("%s: apiVersion %q kind %q is not read here; the file holds one AgentRun (%s), AgentRunTemplates, MCPServers, v1 Secrets and v1 ConfigMaps",
				what, tm.APIVersion, tm.Kind, v1alpha1.GroupVersion)
		}
	}
	return nil
}

// WithRun is a copy of m (its Secrets, ConfigMaps and templates shared)
// that holds run, checked as ParseManifest checks the AgentRun it reads
// and resolved against m's templates when it names one.
func (c *Checker) WithRun(m *Manifest, run *v1alpha1.AgentRun) (*Manifest, error) {
	doc, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "AgentRun",
		"metadata": run.ObjectMeta, "spec": run.Spec})
	if err != nil {
		return nil, err
	}
	checked, err := c.decodeRun(doc)
	if err != nil {
		return nil, fmt.Errorf("AgentRun %q: %w", run.Name, err)
	}
	cp := *m
	cp.Run = checked
	if err := c.complete(&cp); err != nil {
		return nil, err
	}
	return &cp, nil
}

// complete checks what a run needs of the rest of the manifest, and
// resolves it against the template it names.
func (c *Checker) complete(m *Manifest) error {
	if ref := m.Run.Spec.ContinueFrom; ref != nil {
		return fmt.Errorf("AgentRun %q: spec.continueFrom continues AgentRun %s of a cluster, whose conversation agentrun local cannot read: "+
			"create the follow-up in the cluster (kubectl agentrun continue)", m.Run.Name, ref.Name)
	}
	if ref := m.Run.Spec.TemplateRef; ref != nil {
		run, err := m.resolve(c)
		if err != nil {
			return fmt.Errorf("AgentRun %q: %w", m.Run.Name, err)
		}
		m.Run = run
	}
	// As the operator does when it builds the run: tools that name an
	// MCPServer take its settings, and an entry's mcp.tools become tools
	// of their own. Their Secrets then come from the file, as an inline
	// tool's do.
	if m.Run.Namespace == "" {
		m.Run.Namespace = "default" // where a local run lives
	}
	run, err := kit.ResolveMCPServers(m.Run, m.mcpServer)
	if err != nil {
		var refusal *kit.MCPServerRefusal
		if errors.As(err, &refusal) && refusal.Missing {
			err = fmt.Errorf("%w: add it to the file as a document", err)
		}
		return fmt.Errorf("AgentRun %q: %w", m.Run.Name, err)
	}
	m.Run = run
	if m.Run.Spec.Memory != nil {
		// The memory is kept in the operator's archive, which this
		// process does not open.
		return fmt.Errorf("AgentRun %q sets spec.memory, which is kept in the operator's archive (PostgreSQL); "+
			"agentrun local has no archive: run it with an operator that has one (--archive-postgres-dsn, chart value "+
			"archive.postgres.dsnSecretRef), or remove spec.memory and its memory tools", m.Run.Name)
	}
	if err := m.checkSecretRefs(); err != nil {
		return fmt.Errorf("AgentRun %q: %w", m.Run.Name, err)
	}
	return nil
}

// resolve makes the run from the template it names, as the operator does:
// parameters checked, placeholders replaced, and the result checked as the
// API server checks a run written out in full.
func (m *Manifest) resolve(c *Checker) (*v1alpha1.AgentRun, error) {
	ref := m.Run.Spec.TemplateRef
	tpl := m.Templates[ref.Name]
	if tpl == nil {
		return nil, fmt.Errorf("spec.templateRef names the AgentRunTemplate %q, which is not in the file: add it as a document", ref.Name)
	}
	spec, err := template.Resolve(tpl, m.Run.Spec.Parameters)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "AgentRun",
		"metadata": map[string]any{"name": m.Run.Name, "namespace": m.Run.Namespace}, "spec": spec})
	if err != nil {
		return nil, err
	}
	run, err := c.decodeRun(doc)
	if err != nil {
		return nil, fmt.Errorf("AgentRunTemplate %s with these parameters does not make a valid run: %w", tpl.Name, err)
	}
	run.ObjectMeta = m.Run.ObjectMeta
	run.Spec.Cancel, run.Spec.TTLSecondsAfterFinished = m.Run.Spec.Cancel, m.Run.Spec.TTLSecondsAfterFinished
	run.Spec.TemplateRef, run.Spec.Parameters = ref, m.Run.Spec.Parameters
	return run, nil
}

// mcpServer is the file's MCPServer of a name, or nil.
func (m *Manifest) mcpServer(name string) (*v1alpha1.MCPServer, error) {
	return m.MCPServers[name], nil
}

// decodeMCPServer checks an MCPServer document as the API server checks
// it on create, and returns it with the CRD's defaults applied.
func (c *Checker) decodeMCPServer(doc []byte) (*v1alpha1.MCPServer, error) {
	s := &v1alpha1.MCPServer{}
	return s, decodeChecked(c.mcpServers, "MCPServer", doc, s)
}

// CheckRun checks one AgentRun document (YAML or JSON) as the API server
// checks it on create, and returns it with the CRD's defaults applied.
func (c *Checker) CheckRun(doc []byte) (*v1alpha1.AgentRun, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, err
	}
	return c.decodeRun(j)
}

// decodeRun checks an AgentRun document as the API server checks it on
// create, and returns it with those defaults applied, as a cluster would
// store it.
func (c *Checker) decodeRun(doc []byte) (*v1alpha1.AgentRun, error) {
	run := &v1alpha1.AgentRun{}
	return run, decodeChecked(c.runs, "AgentRun", doc, run)
}

// decodeChecked checks a document of kind as the API server checks it on
// create (unknown fields refused, as kubectl's strict field validation
// does; then the CRD's own defaults, schema and CEL rules, by v), and
// decodes it into out with those defaults applied. An object without a
// namespace is in default, as a local run is.
func decodeChecked(v *crdcheck.Validator, kind string, doc []byte, out any) error {
	var obj map[string]any
	if err := utiljson.Unmarshal(doc, &obj); err != nil {
		return err
	}
	// The metadata first, then the schema (with its defaults) and CEL,
	// as the API server does; only then the Go types, whose decoding
	// errors (a duration without a unit, say) say less than the CRD's.
	var meta metav1.ObjectMeta
	if md, err := json.Marshal(obj["metadata"]); err != nil || json.Unmarshal(md, &meta) != nil {
		return errors.New("metadata is not an object")
	}
	if meta.Namespace == "" {
		meta.Namespace = "default"
	}
	errs := validation.ValidateObjectMeta(&meta, true, pathSegmentName, field.NewPath("metadata"))
	errs = append(errs, v.Create(context.Background(), obj)...)
	if len(errs) > 0 {
		return apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind(kind).GroupKind(), meta.Name, errs)
	}
	// Fields the schema does not know are refused here, as kubectl's
	// strict field validation refuses them.
	if err := strict(doc, reflect.New(reflect.TypeOf(out).Elem()).Interface()); err != nil {
		return err
	}
	// Without HTML escaping: a scripted call's arguments reach the tool,
	// the stream and the transcript as written ("<b>", not "\u003cb\u003e").
	var defaulted bytes.Buffer
	enc := json.NewEncoder(&defaulted)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return err
	}
	return strict(defaulted.Bytes(), out)
}

// pathSegmentName is how the API server checks a custom resource's name:
// a segment of a URL path.
func pathSegmentName(name string, prefix bool) []string {
	if prefix {
		return content.IsPathSegmentPrefix(name)
	}
	return content.IsPathSegmentName(name)
}

// strict decodes one document (JSON by now) and refuses unknown fields,
// as kubectl's default strict field validation does.
func strict(doc []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// decodeNamed decodes the document of a Secret or a ConfigMap (kind)
// strictly into obj, which must be named, and named unlike those of its
// kind the file held before (seen).
func decodeNamed(doc []byte, kind string, obj metav1.Object, seen map[string]map[string]string) error {
	if err := strict(doc, obj); err != nil {
		return err
	}
	if obj.GetName() == "" {
		return errors.New("metadata.name is required")
	}
	if _, dup := seen[obj.GetName()]; dup {
		return fmt.Errorf("a second %s of this name (namespaces are ignored locally)", kind)
	}
	return nil
}

// merged is a Secret's data and stringData, or a ConfigMap's binaryData
// and data, as one map of strings; a key in both has the string's value.
func merged(binary map[string][]byte, text map[string]string) map[string]string {
	values := make(map[string]string, len(binary)+len(text))
	for k, v := range binary {
		values[k] = string(v)
	}
	maps.Copy(values, text)
	return values
}

// SecretReader resolves references against the file's Secrets.
func (m *Manifest) SecretReader() func(ctx context.Context, namespace, name, key string) (string, error) {
	return keyReader("Secret", m.Secrets)
}

// ConfigMapReader resolves references against the file's ConfigMaps.
func (m *Manifest) ConfigMapReader() func(ctx context.Context, namespace, name, key string) (string, error) {
	return keyReader("ConfigMap", m.ConfigMaps)
}

// keyReader resolves references against the file's objects of kind
// (Secret or ConfigMap): their values by name, then by key.
func keyReader(kind string, objs map[string]map[string]string) func(ctx context.Context, namespace, name, key string) (string, error) {
	return func(_ context.Context, _, name, key string) (string, error) {
		values, ok := objs[name]
		if !ok {
			return "", fmt.Errorf("no %s %q in the manifest file", kind, name)
		}
		v, ok := values[key]
		if !ok {
			return "", fmt.Errorf("%s %q has no key %q", kind, name, key)
		}
		return v, nil
	}
}

// checkSecretRefs fails early on a reference the file cannot satisfy. In a
// cluster the Secret or ConfigMap could appear later; here nothing else
// can provide it.
func (m *Manifest) checkSecretRefs() error {
	check := func(field string, ref v1alpha1.SecretKeySelector) error {
		if _, err := m.SecretReader()(context.Background(), "", ref.Name, ref.Key); err != nil {
			return fmt.Errorf("%s: %w (add a v1 Secret document to the file)", field, err)
		}
		return nil
	}
	checkCA := func(field string, ref *v1alpha1.CABundleRef) error {
		switch {
		case ref == nil:
		case ref.SecretKeyRef != nil:
			return check(field, *ref.SecretKeyRef)
		case ref.ConfigMapKeyRef != nil:
			if _, err := m.ConfigMapReader()(context.Background(), "", ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key); err != nil {
				return fmt.Errorf("%s: %w (add a v1 ConfigMap document to the file)", field, err)
			}
		}
		return nil
	}
	spec := &m.Run.Spec
	if ref := spec.Model.APIKeySecretRef; ref != nil && spec.Model.Provider != v1alpha1.ProviderScripted {
		if err := check("model.apiKeySecretRef", *ref); err != nil {
			return err
		}
	}
	if err := checkCA("model.caBundleRef", spec.Model.CABundleRef); err != nil {
		return err
	}
	for i, t := range spec.Tools {
		var hs []v1alpha1.HTTPHeader
		if t.HTTP != nil {
			hs = t.HTTP.Headers
			if err := checkCA(fmt.Sprintf("tools[%d] (%s) http.caBundleRef", i, t.Name), t.HTTP.CABundleRef); err != nil {
				return err
			}
		} else if t.MCP != nil {
			hs = t.MCP.Headers
			if err := checkCA(fmt.Sprintf("tools[%d] (%s) mcp.caBundleRef", i, t.Name), t.MCP.CABundleRef); err != nil {
				return err
			}
			if o := t.MCP.OAuth; o != nil {
				for _, key := range []string{v1alpha1.OAuthClientIDKey, v1alpha1.OAuthClientSecretKey} {
					ref := v1alpha1.SecretKeySelector{Name: o.ClientSecretRef.Name, Key: key}
					if err := check(fmt.Sprintf("tools[%d] (%s) mcp.oauth.clientSecretRef", i, t.Name), ref); err != nil {
						return err
					}
				}
			}
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
