package kit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/anthropic"
	"github.com/agentrun/agentrun/internal/model/gemini"
	"github.com/agentrun/agentrun/internal/model/openai"
	"github.com/agentrun/agentrun/internal/tools"
	"github.com/agentrun/agentrun/internal/tools/agent"
	"github.com/agentrun/agentrun/internal/tools/httptool"
	"github.com/agentrun/agentrun/internal/tools/job"
	"github.com/agentrun/agentrun/internal/tools/kube"
	"github.com/agentrun/agentrun/internal/tools/local"
	"github.com/agentrun/agentrun/internal/tools/mcptool"
	"github.com/agentrun/agentrun/internal/tools/memtool"
	"golang.org/x/oauth2/clientcredentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrUnavailable marks a build that failed because a declared tool is not
// available (an MCP server that does not offer it, or cannot be reached):
// the run ends ToolFailure rather than Error.
var ErrUnavailable = errors.New("a declared tool is not available")

// SecretReader returns one key of a Secret in a namespace. API keys and
// header values are read through it at call time and never stored.
type SecretReader func(ctx context.Context, namespace, name, key string) (string, error)

// SecretAccess returns nil when the service account may read the Secret,
// and an error wrapping ErrSecretForbidden when it may not. It reads
// nothing.
type SecretAccess func(ctx context.Context, namespace, serviceAccount, name string) error

// ErrSecretForbidden marks a Secret the run's service account may not
// read: the run cannot start.
var ErrSecretForbidden = errors.New("the run's ServiceAccount may not read this Secret")

// Builder builds runs. The operator builds with cluster executors (tool
// Jobs, builtin tools impersonating the run's service account); `make dev`
// and `agentrun local` run job tools as local processes.
type Builder struct {
	// LocalJobs runs job tools' command and args as local processes
	// instead of Jobs (the image is not used).
	LocalJobs bool
	// LocalDir is the working directory of local job tools.
	LocalDir string
	// Secrets resolves apiKeySecretRef and header values (agentrun local,
	// tests). SecretsAs, when set, is used instead.
	Secrets SecretReader
	// SecretsAs returns the reader that acts as a run's service account,
	// so that a run reads only the Secrets its account may read (the
	// operator impersonates the account).
	SecretsAs func(serviceAccount string) SecretReader
	// ConfigMaps resolves caBundleRef.configMapKeyRef (agentrun local,
	// tests). ConfigMapsAs, when set, is used instead; with neither, a run
	// that names a ConfigMap fails to build.
	ConfigMaps ConfigMapReader
	// ConfigMapsAs returns the reader that acts as a run's service
	// account, as SecretsAs does.
	ConfigMapsAs func(serviceAccount string) ConfigMapReader
	// CheckSecret, when set, is asked before the run starts about every
	// Secret the run names; a refusal fails the build with the reason.
	CheckSecret SecretAccess
	// Jobs configures the Job executor (cluster mode).
	Jobs job.Config
	// Agents configures the agent tools' executor; without its Client,
	// agent tools are not available (agentrun local).
	Agents agent.Config
	// Kube is the operator's client configuration for builtin tools; nil
	// means builtin tools are not available (agentrun local).
	Kube   *rest.Config
	Mapper meta.RESTMapper
	// HTTPClient is used by model providers (tests point it at fakes);
	// nil means Egress, or the model package's default client. A run's
	// model.caBundleRef is applied to a copy of it.
	HTTPClient *http.Client
	// MaxReplyBytes bounds every response body a model provider reads
	// (model.Config's MaxReplyBytes): a run's baseURL is its author's
	// choice, and a larger body ends the run instead of filling the
	// operator's memory. Zero means model.DefaultMaxReplyBytes.
	MaxReplyBytes int64
	// CloudIdentity names the providers whose runs may call as the
	// process's own cloud identity (bedrock and azure without
	// model.apiKeySecretRef; vertex always): the operator's IRSA role,
	// Workload Identity and so on belong to the platform, which lends
	// them to runs only by naming the provider here (--cloud-identity).
	// A run of a provider not named fails to start, saying so.
	// AnyCloudIdentity lends every one (agentrun local, where the
	// identity is the user's own).
	CloudIdentity    []v1alpha1.ModelProvider
	AnyCloudIdentity bool
	// Egress, when set, carries every request a run sends from this
	// process: model calls (unless HTTPClient is set) and, through its
	// clients' Transport, HTTP and MCP tools' requests (each with its own
	// redirect policy), with the run's grant added (Build). The operator
	// sets it to the clients of its egress policy (internal/egress); nil
	// leaves each package its default transport.
	Egress *egress.Clients
	// Memory keeps the runs' memories (spec.memory): the archive's
	// PostgreSQL. Nil refuses every run that sets spec.memory, saying how
	// to configure one.
	Memory memtool.Store
	// Clock is time.Now unless set.
	Clock func() time.Time

	// shared is what the runs this builder builds share (shared.go).
	shared shared
}

// Build makes a run's kit. Builtin tools' schemas are filled in, MCP
// tools are inspected (their server's hints may only tighten what the
// manifest declares), and the engine is compiled. grant is what the
// platform's policies open to the run's requests beyond Egress's policy
// (platform.Egress; ignored without Egress).
func (b *Builder) Build(ctx context.Context, run *v1alpha1.AgentRun, grant egress.Grant) (*Kit, error) {
	cfg, err := Config(&run.Spec)
	if err != nil {
		return nil, err
	}
	var egressed *http.Client
	if b.Egress != nil {
		egressed = b.Egress.For(grant)
	}
	// The UID is unique to this run and survives operator restarts, so the
	// idempotency keys built from it are too (agentrun local gives each
	// invocation a fresh UID).
	cfg.RunID = string(run.UID)
	if err := b.checkSecrets(ctx, run); err != nil {
		return nil, err
	}
	executors := map[string]loop.Toolbox{}
	var jobTools []job.Tool
	var agentTools []agent.Tool
	var builtins map[string]kube.Builtin
	var memTools map[string]memtool.Op
	for i := range run.Spec.Tools {
		t := &run.Spec.Tools[i]
		ts := &cfg.Tools[i]
		switch {
		case t.HTTP != nil:
			opts := []httptool.Option{httptool.WithTemplates(&b.shared.templates)}
			rt, err := b.toolRoundTripper(ctx, run, egressed, fmt.Sprintf("tools[%d] (%s) http.caBundleRef", i, t.Name), t.HTTP.CABundleRef)
			if err != nil {
				return nil, err
			}
			if rt != nil {
				opts = append(opts, httptool.WithTransport(rt))
			}
			ex, err := httptool.New(httptool.Config{URL: t.HTTP.URL, Method: string(t.HTTP.Method), Headers: headers(t.HTTP.Headers), Body: t.HTTP.Body},
				b.resolver(run), opts...)
			if err != nil {
				return nil, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
			}
			executors[t.Name] = ex
		case t.MCP != nil:
			if t.MCP.ServerRef != nil || len(t.MCP.Tools) > 1 || (len(t.MCP.Tools) == 1 && t.MCP.Tool != t.MCP.Tools[0]) {
				// What builds a run resolves the MCPServers it names, and
				// expands their mcp.tools, first (ResolveMCPServers).
				return nil, fmt.Errorf("tools[%d] (%s): mcp.serverRef and mcp.tools are resolved before the run is built (ResolveMCPServers)", i, t.Name)
			}
			// A tool expanded from an entry's mcp.tools: the entry named
			// it, so a server that does not offer it is the manifest's
			// mistake, and the model is shown the server's words for it.
			listed := len(t.MCP.Tools) == 1
			opts, err := b.mcpOptions(ctx, run, egressed, fmt.Sprintf("tools[%d] (%s)", i, t.Name), t.MCP.URL, &t.MCP.MCPConnection)
			if err != nil {
				return nil, err
			}
			ex, err := mcptool.New(t.MCP.URL, t.MCP.Tool, opts...)
			if err != nil {
				return nil, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
			}
			hints, err := ex.Inspect(ctx)
			switch {
			case listed && errors.Is(err, mcptool.ErrNotOffered):
				return nil, fmt.Errorf("tool %s: %v", t.Name, err)
			case err != nil:
				return nil, fmt.Errorf("%w: tool %s: %v", ErrUnavailable, t.Name, err)
			}
			if listed {
				ts.Description, ts.Parameters, _ = ex.Definition()
			}
			ts.Mutates, ts.Reversible = mcptool.Tighten(ts.Mutates, ts.Reversible, hints)
			if t.MCP.RequireReadOnlyHint && !hints.ReadOnly {
				// Read-only only on the server's word, which it did not give.
				ts.Mutates = true
			}
			ts.Repeatable = !ts.Mutates
			executors[t.Name] = ex
		case t.Builtin != "" && isMemory(t.Builtin):
			op, _ := memtool.Parse(string(t.Builtin))
			if ts.Description == "" {
				ts.Description = op.Description()
			}
			if len(ts.Parameters) == 0 {
				ts.Parameters = op.Parameters()
			}
			if op.Mutates() {
				// Declared by what it does, as an MCP server's hints
				// may only tighten: a rule with mutating: true, and
				// the platform's readOnlyTools, see it so.
				ts.Mutates, ts.Repeatable = true, false
			}
			if memTools == nil {
				memTools = map[string]memtool.Op{}
			}
			memTools[t.Name] = op
		case t.Builtin == v1alpha1.BuiltinAskPerson:
			// No executor: the engine asks a person (Config set AsksPerson).
		case t.Builtin != "":
			bt, err := kube.ParseBuiltin(string(t.Builtin))
			if err != nil {
				return nil, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
			}
			if ts.Description == "" {
				ts.Description = bt.Description()
			}
			if len(ts.Parameters) == 0 {
				ts.Parameters = bt.Parameters()
			}
			if builtins == nil {
				builtins = map[string]kube.Builtin{}
			}
			builtins[t.Name] = bt
		case t.Agent != nil:
			at, err := b.agentTool(ctx, run, i, ts)
			if err != nil {
				return nil, err
			}
			agentTools = append(agentTools, at)
		case t.Job != nil && b.LocalJobs:
			if len(t.Job.Command) == 0 {
				return nil, fmt.Errorf("tools[%d] (%s): a job tool run locally needs a command", i, t.Name)
			}
			var env []string
			for _, e := range t.Job.Env {
				v := e.Value
				if e.ValueFrom != nil {
					// On this machine there is no kubelet to read it:
					// read as the run would, once, for the process.
					ref := e.ValueFrom.SecretKeyRef
					read := b.secretReader(run)
					if read == nil {
						return nil, fmt.Errorf("tools[%d] (%s) env %s: no Secret reader is configured", i, t.Name, e.Name)
					}
					var err error
					if v, err = read(ctx, run.Namespace, ref.Name, ref.Key); err != nil {
						return nil, fmt.Errorf("tools[%d] (%s) env %s: reading Secret %s key %s: %w", i, t.Name, e.Name, ref.Name, ref.Key, err)
					}
				}
				env = append(env, e.Name+"="+v)
			}
			ex, err := local.New(t.Job.Command[0], append(append([]string{}, t.Job.Command[1:]...), t.Job.Args...), env, b.localDir())
			if err != nil {
				return nil, fmt.Errorf("tools[%d] (%s): %w", i, t.Name, err)
			}
			executors[t.Name] = ex
			ts.StartupGrace, ts.KillGrace = 0, local.DefaultGracePeriod
		case t.Job != nil:
			if pl := b.Jobs.PendingLimit; pl > 0 && pl < ts.StartupGrace {
				ts.StartupGrace = pl // the executor fails a pod pending longer
			}
			jobTools = append(jobTools, jobTool(t, ts.Mutates))
		default:
			return nil, fmt.Errorf("tools[%d] (%s) has no executor", i, t.Name)
		}
	}
	if len(jobTools) > 0 {
		jr := job.Run{Namespace: run.Namespace, ServiceAccountName: run.Spec.ServiceAccountName,
			Owner: *metav1.NewControllerRef(run, v1alpha1.GroupVersion.WithKind("AgentRun"))}
		if shard, ok := run.Labels[v1alpha1.LabelShard]; ok {
			// The shard's cache selects Jobs by this label too.
			jr.Labels = map[string]string{v1alpha1.LabelShard: shard}
		}
		ex, err := job.New(b.Jobs, jr, jobTools)
		if err != nil {
			return nil, err
		}
		for _, jt := range jobTools {
			executors[jt.Name] = ex
		}
	}
	if len(agentTools) > 0 {
		ex, err := agent.New(b.Agents, agent.Parent{Name: run.Name, Namespace: run.Namespace, UID: run.UID, Labels: run.Labels}, agentTools)
		if err != nil {
			return nil, err
		}
		for _, at := range agentTools {
			executors[at.Name] = ex
		}
	}
	if len(builtins) > 0 {
		if b.Kube == nil {
			return nil, fmt.Errorf("%w: builtin kubernetes tools need a cluster; run this manifest with the operator or make dev", ErrUnavailable)
		}
		ex, err := kube.New(kube.Config{Base: b.Kube, Mapper: b.Mapper, Namespace: run.Namespace,
			ServiceAccountName: run.Spec.ServiceAccountName, Tools: builtins})
		if err != nil {
			return nil, err
		}
		for name := range builtins {
			executors[name] = ex
		}
	}

	if run.Spec.Memory != nil {
		ex, err := b.memory(run, memTools)
		if err != nil {
			return nil, err
		}
		for name := range memTools {
			executors[name] = ex
		}
	}

	m, err := b.model(ctx, run, &run.Spec.Model.ModelEndpoint, "model", egressed)
	if err != nil {
		return nil, err
	}
	opts := []loop.Option{loop.WithSchemas(&b.shared.schemas)}
	if b.Clock != nil {
		opts = append(opts, loop.WithClock(b.Clock))
	}
	// What a provider bills beyond the manifest's prices is its
	// adapter's to say.
	cfg.Model.Pricing = billed(m, cfg.Model.Pricing)
	var fallbacks []loop.Model
	for i := range run.Spec.Model.Fallbacks {
		f, err := b.model(ctx, run, &run.Spec.Model.Fallbacks[i], fmt.Sprintf("model.fallbacks[%d]", i), egressed)
		if err != nil {
			return nil, fmt.Errorf("model.fallbacks[%d] (%s): %w", i, run.Spec.Model.Fallbacks[i].Name, err)
		}
		cfg.Fallbacks[i].Pricing = billed(f, cfg.Fallbacks[i].Pricing)
		fallbacks = append(fallbacks, f)
	}
	eng, err := loop.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	return &Kit{Engine: eng, Model: m, Fallbacks: fallbacks, Tools: tools.NewRouter(executors)}, nil
}

// NoMemoryStore is why a run that sets spec.memory cannot run on an
// operator without an archive.
const NoMemoryStore = "spec.memory is kept in the archive's PostgreSQL, and this operator has no archive: " +
	"the platform team configures one with the operator's --archive-postgres-dsn (AGENTRUN_ARCHIVE_DSN; " +
	"chart value archive.postgres.dsnSecretRef)"

// isMemory says whether a builtin is one of the memory tools.
func isMemory(b v1alpha1.BuiltinTool) bool {
	_, ok := memtool.Parse(string(b))
	return ok
}

// memory makes the run's memory tools, over spec.memory as the platform's
// policies left it; what it leaves unset (a manifest the API server did
// not default, in agentrun local) takes memtool's defaults.
func (b *Builder) memory(run *v1alpha1.AgentRun, ops map[string]memtool.Op) (*memtool.Toolbox, error) {
	if b.Memory == nil {
		return nil, errors.New(NoMemoryStore)
	}
	m := run.Spec.Memory
	cfg := memtool.Config{Store: b.Memory, Namespace: run.Namespace, Memory: m.Name, Run: run.Name,
		MaxEntries: memtool.DefaultMaxEntries, MaxEntryBytes: memtool.DefaultMaxEntryBytes, TTL: memtool.DefaultTTL,
		Tools: ops, Clock: b.Clock}
	if m.MaxEntries != nil {
		cfg.MaxEntries = int(*m.MaxEntries)
	}
	if m.MaxEntryBytes != nil {
		cfg.MaxEntryBytes = int(*m.MaxEntryBytes)
	}
	if m.TTL != nil {
		cfg.TTL = m.TTL.Duration
	}
	return memtool.New(cfg)
}

// agentTool reads the template of agent tool tools[i] and completes what
// the engine knows of it (ts): the child's ceilings capped by the
// template's, and, when the tool gives no parameters, its schema made
// from the template's parameters.
func (b *Builder) agentTool(ctx context.Context, run *v1alpha1.AgentRun, i int, ts *loop.ToolSpec) (agent.Tool, error) {
	t := &run.Spec.Tools[i]
	if b.Agents.Client == nil && b.Agents.InProcess == nil {
		return agent.Tool{}, fmt.Errorf("%w: tools[%d] (%s): agent tools make AgentRuns and need the operator", ErrUnavailable, i, t.Name)
	}
	read := b.Agents.Reader
	if read == nil {
		read = b.Agents.Client
	}
	tpl := &v1alpha1.AgentRunTemplate{}
	if err := read.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: t.Agent.TemplateRef.Name}, tpl); err != nil {
		if apierrors.IsNotFound(err) {
			return agent.Tool{}, fmt.Errorf("tools[%d] (%s): AgentRunTemplate %q does not exist in namespace %s", i, t.Name, t.Agent.TemplateRef.Name, run.Namespace)
		}
		return agent.Tool{}, fmt.Errorf("%w: tools[%d] (%s): reading AgentRunTemplate %s: %v", ErrUnavailable, i, t.Name, t.Agent.TemplateRef.Name, err)
	}
	if err := agentTool(ts, t, i, &tpl.Spec.Run.Budget); err != nil {
		return agent.Tool{}, err
	}
	at := agent.Tool{Name: t.Name, Template: tpl, Parameters: t.Agent.Parameters} // agent.New defaults MaxDepth
	if n := t.Agent.MaxInFlight; n != nil {
		at.MaxInFlight = int(*n)
	}
	if d := t.Agent.MaxDepth; d != nil {
		at.MaxDepth = int(*d)
	}
	if len(ts.Parameters) == 0 {
		ts.Parameters, at.FromArgs = agent.Schema(tpl, t.Agent.Parameters), true
	}
	return at, nil
}

// billed is p completed by what m's provider bills beyond it.
func billed(m loop.Model, p loop.Pricing) loop.Pricing {
	if pr, ok := m.(pricer); ok {
		return pr.Pricing(p)
	}
	return p
}

// jobTool is the Job executor's view of a job tool. A Secret's value stays
// a reference, for the kubelet to read for the tool's pod: it never passes
// through the operator.
func jobTool(t *v1alpha1.ToolSpec, mutates bool) job.Tool {
	jt := job.Tool{Name: t.Name, Image: t.Job.Image, Command: t.Job.Command, Args: t.Job.Args,
		MountServiceAccountToken: t.Job.AutomountServiceAccountToken != nil && *t.Job.AutomountServiceAccountToken,
		Mutates:                  mutates}
	for _, e := range t.Job.Env {
		ev := corev1.EnvVar{Name: e.Name, Value: e.Value}
		if e.ValueFrom != nil {
			// A reference in the pod: the kubelet reads the value,
			// which never passes through the operator.
			ref := e.ValueFrom.SecretKeyRef
			ev.ValueFrom = &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: ref.Key}}
		}
		jt.Env = append(jt.Env, ev)
	}
	if t.Job.Resources != nil {
		jt.Resources = *t.Job.Resources
	}
	if p := t.Job.Pod; p != nil {
		if p.Resources != nil {
			jt.Resources = *p.Resources
		}
		jt.Pod = job.Pod{NodeSelector: p.NodeSelector, Tolerations: p.Tolerations, Labels: p.Labels,
			Annotations: p.Annotations, RuntimeClassName: p.RuntimeClassName}
	}
	for _, r := range t.Job.Egress {
		er := job.EgressRule{CIDR: r.CIDR}
		for _, p := range r.Ports {
			er.Ports = append(er.Ports, job.Port{Port: p.Port, Protocol: p.Protocol})
		}
		jt.Egress = append(jt.Egress, er)
	}
	return jt
}

// pricer is a model adapter that completes the run's prices with what its
// provider bills (anthropic: cache writes).
type pricer interface {
	Pricing(loop.Pricing) loop.Pricing
}

func (b *Builder) localDir() string {
	if b.LocalDir != "" {
		return b.LocalDir
	}
	d, _ := filepath.Abs(".")
	return d
}

// model is the adapter of the run's model spec (model, or one of
// model.fallbacks, as field names it), called with the model's call
// settings; egressed is the run's egress client (nil without Egress).
func (b *Builder) model(ctx context.Context, run *v1alpha1.AgentRun, spec *v1alpha1.ModelEndpoint, field string, egressed *http.Client) (loop.Model, error) {
	if spec.Provider == v1alpha1.ProviderScripted {
		return &loop.Scripted{Entries: Script(run.Spec.Model.Script)}, nil
	}
	// One attempt per call: the engine retries transient failures itself
	// (model.retry), with a backoff it reserves and checkpoints.
	// The call's deadline is the engine's (loop.Engine.CallModel).
	client, err := b.modelClient(ctx, run, spec.CABundleRef, field, egressed)
	if err != nil {
		return nil, err
	}
	mc := model.Config{BaseURL: spec.BaseURL, Model: spec.Name, HTTPClient: client, MaxRetries: -1,
		MaxReplyBytes: b.MaxReplyBytes, Clients: &b.shared.models}
	if r := run.Spec.Model.Reasoning; r != nil {
		mc.ReasoningEffort = string(r.Effort)
		if r.BudgetTokens != nil {
			mc.ThinkingBudget = int64(*r.BudgetTokens)
		}
	}
	if ref := spec.APIKeySecretRef; ref != nil && spec.Provider != v1alpha1.ProviderVertex {
		mc.KeySource = b.apiKey(run, ref)
	}
	if err := b.lendsIdentity(spec.Provider, mc.KeySource != nil); err != nil {
		return nil, err
	}
	switch spec.Provider {
	case v1alpha1.ProviderOpenAI:
		if spec.API == v1alpha1.APIResponses {
			return openai.NewResponses(mc)
		}
		return openai.New(mc)
	case v1alpha1.ProviderAnthropic:
		if mc.KeySource == nil {
			return nil, fmt.Errorf("model.apiKeySecretRef is required with provider %s", spec.Provider)
		}
		return anthropic.New(mc)
	case v1alpha1.ProviderBedrock:
		if spec.Bedrock == nil {
			return nil, errors.New("provider bedrock needs model.bedrock")
		}
		bc := anthropic.Bedrock{Region: spec.Bedrock.Region}
		if mc.KeySource == nil {
			if bc.Credentials, err = b.shared.cloud.awsCredentials(ctx, bc.Region); err != nil {
				return nil, err
			}
		}
		return anthropic.NewBedrock(mc, bc)
	case v1alpha1.ProviderVertex:
		if spec.Vertex == nil {
			return nil, errors.New("provider vertex needs model.vertex")
		}
		return anthropic.NewVertex(mc, anthropic.Vertex{ProjectID: spec.Vertex.ProjectID, Region: spec.Vertex.Region,
			TokenSource: b.shared.cloud.googleTokens()})
	case v1alpha1.ProviderGemini:
		var v gemini.Vertex
		if spec.Vertex != nil {
			v = gemini.Vertex{ProjectID: spec.Vertex.ProjectID, Region: spec.Vertex.Region, TokenSource: b.shared.cloud.googleTokens()}
		}
		return gemini.New(ctx, mc, v)
	case v1alpha1.ProviderAzure:
		if spec.Azure == nil {
			return nil, errors.New("provider azure needs model.azure")
		}
		az := openai.Azure{Endpoint: spec.Azure.Endpoint, APIVersion: spec.Azure.APIVersion}
		if mc.KeySource == nil {
			if az.Credential, err = b.shared.cloud.azureCredential(); err != nil {
				return nil, err
			}
		}
		return openai.NewAzure(mc, az)
	}
	return nil, fmt.Errorf("unknown model provider %q", spec.Provider)
}

// Judge is the model of an evaluation's judge (spec.judge.model), built
// as a run's model is, for a run in namespace of its default
// ServiceAccount (which reads the key) under the operator's egress policy
// with no grant, and its prices, completed by what the provider bills.
func (b *Builder) Judge(ctx context.Context, namespace string, spec *v1alpha1.ModelSpec) (loop.Model, loop.Pricing, error) {
	const field = "judge.model"
	p, err := pricing(field, spec.Pricing)
	if err != nil {
		return nil, p, err
	}
	var egressed *http.Client
	if b.Egress != nil {
		egressed = b.Egress.For(egress.Grant{})
	}
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: namespace}, Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{Model: *spec}}}
	m, err := b.model(ctx, run, &spec.ModelEndpoint, field, egressed)
	if err != nil {
		return nil, p, fmt.Errorf("%s: %w", field, err)
	}
	return m, billed(m, p), nil
}

// lendsIdentity refuses a run that would call as the operator's own cloud
// identity when the operator does not lend it for that provider.
func (b *Builder) lendsIdentity(p v1alpha1.ModelProvider, hasKey bool) error {
	var whose string
	switch {
	case p == v1alpha1.ProviderVertex, p == v1alpha1.ProviderGemini && !hasKey:
		whose = "Google"
	case p == v1alpha1.ProviderBedrock && !hasKey:
		whose = "AWS"
	case p == v1alpha1.ProviderAzure && !hasKey:
		whose = "Entra ID"
	default:
		return nil
	}
	if b.AnyCloudIdentity || slices.Contains(b.CloudIdentity, p) {
		return nil
	}
	how := "set model.apiKeySecretRef, or ask"
	if p == v1alpha1.ProviderVertex {
		how = "ask"
	}
	return fmt.Errorf("provider %s without an API key calls as the operator's %s identity, which this operator does not lend to runs: %s the platform team to add %s to the operator's --cloud-identity (chart value cloudIdentity)",
		p, whose, how, p)
}

// apiKey reads the run's API key from its Secret at every call, as the
// run's ServiceAccount.
func (b *Builder) apiKey(run *v1alpha1.AgentRun, ref *v1alpha1.SecretKeySelector) model.KeySource {
	ns, name, key := run.Namespace, ref.Name, ref.Key
	read := b.secretReader(run)
	return func(ctx context.Context) (string, error) {
		if read == nil {
			return "", errors.New("no Secret reader is configured")
		}
		v, err := read(ctx, ns, name, key)
		if err != nil {
			return "", fmt.Errorf("reading the API key from Secret %s key %s: %w", name, key, err)
		}
		return strings.TrimSpace(v), nil
	}
}

// ErrCredentialsUnreadable marks an MCP server's credentials (a header's
// Secret, the OAuth client's Secret) that could not be read.
var ErrCredentialsUnreadable = errors.New("the credentials could not be read")

// mcpOptions is how a run reaches an MCP server at endpoint with the
// connection settings c: its transport, its CA bundle, its OAuth client
// (whose Secret is read now) and its headers (whose Secrets are read at
// each request), through egressed. field names the tool in errors.
func (b *Builder) mcpOptions(ctx context.Context, run *v1alpha1.AgentRun, egressed *http.Client, field, endpoint string, c *v1alpha1.MCPConnection) ([]mcptool.Option, error) {
	opts := []mcptool.Option{}
	if c.Transport != "" {
		opts = append(opts, mcptool.WithProtocol(mcptool.Protocol(c.Transport)))
	}
	rt, err := b.toolRoundTripper(ctx, run, egressed, field+" mcp.caBundleRef", c.CABundleRef)
	if err != nil {
		return nil, err
	}
	if o := c.OAuth; o != nil {
		resolve := b.resolver(run)
		id, err := resolve(ctx, o.ClientSecretRef.Name, v1alpha1.OAuthClientIDKey)
		if err == nil {
			var secret string
			secret, err = resolve(ctx, o.ClientSecretRef.Name, v1alpha1.OAuthClientSecretKey)
			opts = append(opts, mcptool.WithClientCredentials(clientcredentials.Config{
				ClientID: strings.TrimSpace(id), ClientSecret: strings.TrimRight(secret, "\r\n"), TokenURL: o.TokenURL, Scopes: o.Scopes}, rt))
		}
		if err != nil {
			return nil, fmt.Errorf("%s mcp.oauth.clientSecretRef: %w: %w", field, ErrCredentialsUnreadable, err)
		}
	}
	if len(c.Headers) > 0 {
		ht, err := newHeaderTransport(endpoint, headers(c.Headers), b.resolver(run), rt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		opts = append(opts, mcptool.WithTransport(ht), mcptool.WithRedaction(ht.sent))
	} else if rt != nil {
		opts = append(opts, mcptool.WithTransport(rt))
	}
	return opts, nil
}

// MCPServer is how the operator reaches an MCPServer to list its tools:
// as a run of the server's namespace acting as its serviceAccountName
// would, through the egress policy with grant (what the AgentRunPolicies
// governing the namespace open). An error wraps ErrCredentialsUnreadable
// when the OAuth client's Secret could not be read; one from the
// server's Server.Tools does when a header's Secret could not be.
func (b *Builder) MCPServer(ctx context.Context, s *v1alpha1.MCPServer, grant egress.Grant) (*mcptool.Server, error) {
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace}, Spec: v1alpha1.AgentRunSpec{AgentSpec: v1alpha1.AgentSpec{ServiceAccountName: s.Spec.ServiceAccountName}}}
	var egressed *http.Client
	if b.Egress != nil {
		egressed = b.Egress.For(grant)
	}
	opts, err := b.mcpOptions(ctx, run, egressed, "MCPServer "+s.Name, s.Spec.URL, &s.Spec.MCPConnection)
	if err != nil {
		return nil, err
	}
	return mcptool.NewServer(s.Spec.URL, opts...)
}

// toolTransport is the transport of HTTP and MCP tools: the run's egress
// client's, or nil for their packages' defaults.
func toolTransport(egressed *http.Client) http.RoundTripper {
	if egressed == nil {
		return nil
	}
	if egressed.Transport == nil {
		return http.DefaultTransport
	}
	return egressed.Transport
}

// serviceAccount is the account a run acts as.
func serviceAccount(run *v1alpha1.AgentRun) string {
	if run.Spec.ServiceAccountName != "" {
		return run.Spec.ServiceAccountName
	}
	return "default"
}

// secretReader reads as the run's service account when the builder can.
func (b *Builder) secretReader(run *v1alpha1.AgentRun) SecretReader {
	if b.SecretsAs != nil {
		return b.SecretsAs(serviceAccount(run))
	}
	return b.Secrets
}

func (b *Builder) resolver(run *v1alpha1.AgentRun) httptool.SecretResolver {
	read, namespace := b.secretReader(run), run.Namespace
	return func(ctx context.Context, name, key string) (string, error) {
		if read == nil {
			return "", errors.New("no Secret reader is configured")
		}
		return read(ctx, namespace, name, key)
	}
}

// checkSecrets asks CheckSecret about every Secret the run names: the API
// key, the headers' valueFrom and the job tools' env valueFrom. Only a refusal fails: a Secret that does
// not exist yet may be created before the first call needs it.
func (b *Builder) checkSecrets(ctx context.Context, run *v1alpha1.AgentRun) error {
	if b.CheckSecret == nil {
		return nil
	}
	sa := serviceAccount(run)
	check := func(field, name string) error {
		err := b.CheckSecret(ctx, run.Namespace, sa, name)
		if errors.Is(err, ErrSecretForbidden) {
			return fmt.Errorf("%s: %w", field, err)
		}
		return nil
	}
	spec := &run.Spec
	if ref := spec.Model.APIKeySecretRef; ref != nil && spec.Model.Provider != v1alpha1.ProviderScripted {
		if err := check("model.apiKeySecretRef", ref.Name); err != nil {
			return err
		}
	}
	for i, f := range spec.Model.Fallbacks {
		if ref := f.APIKeySecretRef; ref != nil {
			if err := check(fmt.Sprintf("model.fallbacks[%d].apiKeySecretRef", i), ref.Name); err != nil {
				return err
			}
		}
	}
	for i, t := range spec.Tools {
		var hs []v1alpha1.HTTPHeader
		switch {
		case t.HTTP != nil:
			hs = t.HTTP.Headers
		case t.MCP != nil:
			hs = t.MCP.Headers
			if o := t.MCP.OAuth; o != nil {
				if err := check(fmt.Sprintf("tools[%d] (%s) mcp.oauth.clientSecretRef", i, t.Name), o.ClientSecretRef.Name); err != nil {
					return err
				}
			}
		case t.Job != nil:
			// The kubelet reads these for the tool's pod whatever the
			// pod's account may do; asking first keeps a run to the
			// Secrets its account may get.
			for _, e := range t.Job.Env {
				if e.ValueFrom == nil {
					continue
				}
				if err := check(fmt.Sprintf("tools[%d] (%s) env %s", i, t.Name, e.Name), e.ValueFrom.SecretKeyRef.Name); err != nil {
					return err
				}
			}
		}
		for _, h := range hs {
			if h.ValueFrom == nil {
				continue
			}
			if err := check(fmt.Sprintf("tools[%d] (%s) header %s", i, t.Name, h.Name), h.ValueFrom.SecretKeyRef.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

func headers(hs []v1alpha1.HTTPHeader) []httptool.Header {
	out := make([]httptool.Header, 0, len(hs))
	for _, h := range hs {
		hd := httptool.Header{Name: h.Name, Value: h.Value}
		if h.ValueFrom != nil {
			hd.Secret = &httptool.SecretKeyRef{Name: h.ValueFrom.SecretKeyRef.Name, Key: h.ValueFrom.SecretKeyRef.Key}
		}
		out = append(out, hd)
	}
	return out
}

// headerTransport adds an MCP tool's headers (values from Secrets read
// per request) to every request to its server, and to no other: a request
// to another scheme, host or port (which the MCP client's redirect policy
// already refuses) is failed rather than sent with them. It remembers the
// Secret values it sent, for the tool's answers to be redacted of them.
type headerTransport struct {
	base    http.RoundTripper
	origin  *url.URL
	headers []httptool.Header
	resolve httptool.SecretResolver

	mu      sync.Mutex
	secrets map[string]string // header name -> last value sent
}

// base carries the requests; nil means http.DefaultTransport.
func newHeaderTransport(endpoint string, hs []httptool.Header, resolve httptool.SecretResolver, base http.RoundTripper) (*headerTransport, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("mcp tool: %q is not an http(s) URL", endpoint)
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &headerTransport{base: base, origin: u, headers: hs, resolve: resolve, secrets: map[string]string{}}, nil
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != t.origin.Scheme || req.URL.Host != t.origin.Host {
		return nil, fmt.Errorf("refusing to send the tool's headers to %s://%s: only %s://%s may receive them",
			req.URL.Scheme, req.URL.Host, t.origin.Scheme, t.origin.Host)
	}
	req = req.Clone(req.Context())
	for _, h := range t.headers {
		v := h.Value
		if h.Secret != nil {
			s, err := t.resolve(req.Context(), h.Secret.Name, h.Secret.Key)
			if err != nil {
				return nil, &unreadableHeader{name: h.Name, err: err}
			}
			v = strings.TrimRight(s, "\r\n")
			t.mu.Lock()
			t.secrets[h.Name] = v
			t.mu.Unlock()
		}
		req.Header.Set(h.Name, v)
	}
	return t.base.RoundTrip(req)
}

// unreadableHeader is a header whose Secret could not be read.
type unreadableHeader struct {
	name string
	err  error
}

func (e *unreadableHeader) Error() string   { return fmt.Sprintf("header %s: %v", e.name, e.err) }
func (e *unreadableHeader) Unwrap() []error { return []error{ErrCredentialsUnreadable, e.err} }

// sent returns the Secret values the transport has sent.
func (t *headerTransport) sent() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.secrets))
	for _, v := range t.secrets {
		out = append(out, v)
	}
	return out
}
