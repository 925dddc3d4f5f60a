package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// mcpServerRefusal is a serverRef the run cannot use: the MCPServer does
// not exist (missing; it may yet be created), or does not include the
// tool. The run cannot start.
type mcpServerRefusal struct {
	msg     string
	missing bool
}

func (e *mcpServerRefusal) Error() string { return e.msg }

// ReasonMCPServerNotFound is the event reason of a run whose tool names
// an MCPServer that does not exist (yet).
const ReasonMCPServerNotFound = "MCPServerNotFound"

// resolveMCPServers returns run with each mcp tool that names an
// MCPServer (mcp.serverRef) given the server's url, transport, headers,
// oauth and caBundleRef, read live, so that what builds the run, and the
// platform's policies (their urls, and the server's hints the build
// reads), see the server as they see an inline url. run itself is not
// changed; a run without serverRef is returned as it is.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=mcpservers,verbs=get
func resolveMCPServers(ctx context.Context, reader client.Reader, run *v1alpha1.AgentRun) (*v1alpha1.AgentRun, error) {
	if !slices.ContainsFunc(run.Spec.Tools, func(t v1alpha1.ToolSpec) bool { return t.MCP != nil && t.MCP.ServerRef != nil }) {
		return run, nil
	}
	out := run.DeepCopy()
	for i := range out.Spec.Tools {
		t := &out.Spec.Tools[i]
		if t.MCP == nil || t.MCP.ServerRef == nil {
			continue
		}
		s := &v1alpha1.MCPServer{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: t.MCP.ServerRef.Name}, s)
		switch {
		case apierrors.IsNotFound(err):
			return nil, &mcpServerRefusal{msg: fmt.Sprintf("tools[%d] (%s): MCPServer %q does not exist in namespace %s", i, t.Name, t.MCP.ServerRef.Name, run.Namespace),
				missing: true}
		case err != nil:
			return nil, fmt.Errorf("reading MCPServer %s of tools[%d] (%s): %w", t.MCP.ServerRef.Name, i, t.Name, err)
		}
		if inc := s.Spec.IncludeTools; len(inc) > 0 && !slices.Contains(inc, t.MCP.Tool) {
			return nil, &mcpServerRefusal{msg: fmt.Sprintf("tools[%d] (%s): MCPServer %s does not include tool %q; its includeTools are %s",
				i, t.Name, s.Name, t.MCP.Tool, strings.Join(inc, ", "))}
		}
		t.MCP.URL, t.MCP.MCPConnection, t.MCP.ServerRef = s.Spec.URL, *s.Spec.MCPConnection.DeepCopy(), nil
	}
	return out, nil
}
