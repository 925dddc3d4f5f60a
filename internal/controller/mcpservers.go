package controller

import (
	"context"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReasonMCPServerNotFound is the event reason of a run whose tool names
// an MCPServer that does not exist (yet).
const ReasonMCPServerNotFound = "MCPServerNotFound"

// resolveMCPServers is kit.ResolveMCPServers with the run's MCPServers
// read live from its namespace: each tool that names one takes its
// settings, and each entry with mcp.tools becomes one tool per name, so
// that the platform's policies, and what builds the run, see them as
// they see an inline tool. run itself is not changed.
//
// +kubebuilder:rbac:groups=agents.agentrun.dev,resources=mcpservers,verbs=get
func resolveMCPServers(ctx context.Context, reader client.Reader, run *v1alpha1.AgentRun) (*v1alpha1.AgentRun, error) {
	return kit.ResolveMCPServers(run, func(name string) (*v1alpha1.MCPServer, error) {
		s := &v1alpha1.MCPServer{}
		err := reader.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: name}, s)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return s, err
	})
}
