package localrun

// Agent tools in agentrun local: a call's child run is made from the
// file's AgentRunTemplates and runs in this process, through the same
// executor (internal/tools/agent), limits, budget and engine as a child
// the operator runs; it is not created anywhere.

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/tools/agent"
)

// templates reads the file's AgentRunTemplates, in any namespace, as the
// kit reads an agent tool's template.
type templates map[string]*v1alpha1.AgentRunTemplate

func (t templates) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	tpl, ok := t[key.Name]
	out, isTemplate := obj.(*v1alpha1.AgentRunTemplate)
	if !ok || !isTemplate {
		return apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "agentruntemplates"}, key.Name)
	}
	tpl.DeepCopyInto(out)
	return nil
}

func (t templates) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return fmt.Errorf("agentrun local lists nothing")
}

// children runs the child runs of agent tools in this process, with the
// builder of the root run; approve answers their ASKs as the root's are
// answered, one child at a time.
type children struct {
	builder *kit.Builder
	// mcpServers are the file's MCPServers, which a child's tools may
	// name as the root's may.
	mcpServers func(name string) (*v1alpha1.MCPServer, error)
	approve    loop.Approver
	// out is the root run's stream, written under mu; asking holds the
	// terminal while one child's calls are asked.
	out    io.Writer
	mu     sync.Mutex
	asking sync.Mutex
}

// config is the agent tools' executor configuration of agentrun local.
func (c *children) config(tpls templates) agent.Config {
	return agent.Config{Reader: tpls, InProcess: c.run}
}

// run runs child to its end and returns its status, as the operator would
// write it.
func (c *children) run(ctx context.Context, child *v1alpha1.AgentRun) (v1alpha1.AgentRunStatus, error) {
	child.UID = types.UID("local-" + randomHex(6))
	child, err := kit.ResolveMCPServers(child, c.mcpServers)
	if err != nil {
		return v1alpha1.AgentRunStatus{}, err
	}
	k, err := c.builder.Build(ctx, child, egress.Grant{})
	if err != nil {
		return v1alpha1.AgentRunStatus{}, err
	}
	c.say("child run %s started (parent %s, call %s)", child.Name, child.Labels[v1alpha1.LabelParent], child.Annotations[v1alpha1.AnnotationParentCall])
	runner := &loop.Runner{Engine: k.Engine, Model: k.Model, Tools: k.Tools, Fallbacks: k.Fallbacks, Approve: c.approveOne}
	s := &loop.State{}
	runner.Run(ctx, s)
	c.say("child run %s ended %s: %s", child.Name, s.Outcome, oneLine(s.Reason, 200))
	return Status(s, k.Engine.Convergence(s), time.Now()), nil
}

func (c *children) say(format string, a ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, "  "+format+"\n", a...)
}

// approveOne asks one child's calls at a time: children run at once, and
// the terminal is one.
func (c *children) approveOne(ctx context.Context, pending []loop.Call) map[string]loop.Answer {
	c.asking.Lock()
	defer c.asking.Unlock()
	if c.approve == nil {
		return nil
	}
	return c.approve(ctx, pending)
}
