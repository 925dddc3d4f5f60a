package mcpserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/tools/mcptool"
)

func TestStatusTools_filtersBoundsAndClips(t *testing.T) {
	yes := true
	long := strings.Repeat("é", 400) // 800 bytes
	offered := []*mcp.Tool{
		{Name: "lookup", Description: "Looks an account up.", InputSchema: map[string]any{"type": "object"}, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		{Name: "refund", Description: long, Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
		{Name: "export"},
		{Name: "lookup", Description: "a second lookup"},
		{Name: strings.Repeat("n", 300)},
		{Name: strings.Repeat("n", 256) + "-other"},
	}
	tools, count, missing := statusTools(offered, nil)
	if count != 4 || len(missing) != 0 {
		t.Errorf("count, missing = %d, %v; want 4, none", count, missing)
	}
	want := []v1alpha1.MCPServerTool{
		{Name: "lookup", Description: "Looks an account up.", InputSchemaDigest: schemaDigest(map[string]any{"type": "object"}),
			ReadOnlyHint: ptr.To(true), DestructiveHint: ptr.To(false)},
		{Name: "refund", Description: tools[1].Description, ReadOnlyHint: ptr.To(false), DestructiveHint: ptr.To(true)},
		{Name: "export"},
		{Name: strings.Repeat("n", 256)},
	}
	if diff := cmp.Diff(want, tools); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
	if d := tools[1].Description; len(d) > v1alpha1.MaxMCPToolDescription || !strings.HasPrefix(long, strings.TrimSuffix(d, "… [cut]")) {
		t.Errorf("description of %d bytes not cut to %d: %q", len(d), v1alpha1.MaxMCPToolDescription, d)
	}
	if !strings.HasPrefix(want[0].InputSchemaDigest, "sha256:") || len(want[0].InputSchemaDigest) != 71 {
		t.Errorf("digest %q", want[0].InputSchemaDigest)
	}

	tools, count, missing = statusTools(offered, []string{"refund", "close_account"})
	if count != 1 || len(tools) != 1 || tools[0].Name != "refund" || fmt.Sprint(missing) != "[close_account]" {
		t.Errorf("with includeTools: tools %v, count %d, missing %v", tools, count, missing)
	}

	many := make([]*mcp.Tool, v1alpha1.MaxMCPServerTools+5)
	for i := range many {
		many[i] = &mcp.Tool{Name: fmt.Sprintf("t%03d", i)}
	}
	tools, count, _ = statusTools(many, nil)
	if len(tools) != v1alpha1.MaxMCPServerTools || int(count) != len(many) {
		t.Errorf("len(tools), count = %d, %d; want %d, %d", len(tools), count, v1alpha1.MaxMCPServerTools, len(many))
	}
}

// Each failure sets the two conditions to what is known: the server
// reached or not, the credentials accepted, refused or never sent; Ready
// is False with the reason of the condition that says why.
func TestSetFailed_saysWhatFailed(t *testing.T) {
	type conds struct{ Reachable, ReachableReason, Authenticated, AuthenticatedReason, Ready, ReadyReason string }
	for _, tc := range []struct {
		name string
		err  error
		want conds
	}{
		{"unreachable", errors.New("MCP server http://x is unreachable: connection refused"),
			conds{"False", v1alpha1.ReasonMCPUnreachable, "Unknown", v1alpha1.ReasonMCPNotContacted, "False", v1alpha1.ReasonMCPUnreachable}},
		{"credentials refused", fmt.Errorf("MCP server http://x: %w", mcptool.ErrUnauthenticated),
			conds{"True", v1alpha1.ReasonMCPCredentialsRefused, "False", v1alpha1.ReasonMCPCredentialsRefused, "False", v1alpha1.ReasonMCPCredentialsRefused}},
		{"no token", fmt.Errorf("MCP server http://x: %w: %w", mcptool.ErrUnauthenticated, mcptool.ErrNoToken),
			conds{"Unknown", v1alpha1.ReasonMCPNotContacted, "False", v1alpha1.ReasonMCPTokenRefused, "False", v1alpha1.ReasonMCPTokenRefused}},
		{"unreadable Secret", fmt.Errorf("header X: %w", kit.ErrCredentialsUnreadable),
			conds{"Unknown", v1alpha1.ReasonMCPNotContacted, "False", v1alpha1.ReasonMCPCredentialsUnavailable, "False", v1alpha1.ReasonMCPCredentialsUnavailable}},
		{"policies unread", &notContacted{err: errors.New("reading the AgentRunPolicies: forbidden")},
			conds{"Unknown", v1alpha1.ReasonMCPNotContacted, "Unknown", v1alpha1.ReasonMCPNotContacted, "False", v1alpha1.ReasonMCPNotContacted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &v1alpha1.MCPServer{}
			setListed(s, nil, metav1.NewTime(time.Now()))
			setFailed(s, tc.err)
			r := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.MCPServerReachable)
			a := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.MCPServerAuthenticated)
			ready := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.MCPServerReady)
			got := conds{string(r.Status), r.Reason, string(a.Status), a.Reason, string(ready.Status), ready.Reason}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if s.Status.LastDiscoveryTime == nil {
				t.Error("a failure cleared lastDiscoveryTime")
			}
		})
	}
}
