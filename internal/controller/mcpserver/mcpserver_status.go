package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/agentrun/agentrun/internal/tools/mcptool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxMessage bounds a condition's message.
const maxMessage = 2048

// setListed records a successful listing at now: the tools the spec
// includes, both conditions True.
func setListed(s *v1alpha1.MCPServer, offered []*mcp.Tool, now metav1.Time) {
	tools, count, missing := statusTools(offered, s.Spec.IncludeTools)
	s.Status.Tools, s.Status.ToolCount, s.Status.LastDiscoveryTime = tools, count, &now
	msg := fmt.Sprintf("Listed %d tools", count)
	if len(s.Spec.IncludeTools) > 0 {
		msg = fmt.Sprintf("Listed %d tools of the %d the server offers that includeTools names", count, len(offered))
	}
	if int(count) > len(tools) {
		msg += fmt.Sprintf("; status shows the first %d", len(tools))
	}
	if len(missing) > 0 {
		msg += "; the server does not offer " + strings.Join(missing, ", ") + ", which includeTools names"
	}
	set(s, v1alpha1.MCPServerReachable, metav1.ConditionTrue, v1alpha1.ReasonMCPListed, msg)
	set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionTrue, v1alpha1.ReasonMCPListed, "The server accepted the credentials")
	setReady(s)
}

// setFailed records a failed listing: the conditions say what failed;
// the tools of the last listing are kept.
func setFailed(s *v1alpha1.MCPServer, err error) {
	msg := err.Error()
	var nc *notContacted
	switch {
	case errors.Is(err, kit.ErrCredentialsUnreadable):
		set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionFalse, v1alpha1.ReasonMCPCredentialsUnavailable, msg)
		set(s, v1alpha1.MCPServerReachable, metav1.ConditionUnknown, v1alpha1.ReasonMCPNotContacted, "Not contacted: its credentials could not be read")
	case errors.Is(err, mcptool.ErrNoToken):
		set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionFalse, v1alpha1.ReasonMCPTokenRefused, msg)
		set(s, v1alpha1.MCPServerReachable, metav1.ConditionUnknown, v1alpha1.ReasonMCPNotContacted, "Not contacted: no OAuth access token")
	case errors.Is(err, mcptool.ErrUnauthenticated):
		set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionFalse, v1alpha1.ReasonMCPCredentialsRefused, msg)
		set(s, v1alpha1.MCPServerReachable, metav1.ConditionTrue, v1alpha1.ReasonMCPCredentialsRefused, "The server answered, refusing the credentials")
	case errors.As(err, &nc):
		set(s, v1alpha1.MCPServerReachable, metav1.ConditionUnknown, v1alpha1.ReasonMCPNotContacted, msg)
		set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionUnknown, v1alpha1.ReasonMCPNotContacted, "Not contacted")
	default:
		set(s, v1alpha1.MCPServerReachable, metav1.ConditionFalse, v1alpha1.ReasonMCPUnreachable, msg)
		set(s, v1alpha1.MCPServerAuthenticated, metav1.ConditionUnknown, v1alpha1.ReasonMCPNotContacted, "Not contacted: the server was not reached")
	}
	setReady(s)
}

// setReady sums Reachable and Authenticated up as Ready: True when both
// are, else False with the reason and message of the one that says why.
func setReady(s *v1alpha1.MCPServer) {
	reachable := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.MCPServerReachable)
	authenticated := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.MCPServerAuthenticated)
	if reachable == nil || authenticated == nil {
		return
	}
	why := reachable
	switch {
	case reachable.Status == metav1.ConditionTrue && authenticated.Status == metav1.ConditionTrue:
		set(s, v1alpha1.MCPServerReady, metav1.ConditionTrue, reachable.Reason, reachable.Message)
		return
	case authenticated.Status == metav1.ConditionFalse:
		why = authenticated
	}
	set(s, v1alpha1.MCPServerReady, metav1.ConditionFalse, why.Reason, why.Message)
}

func set(s *v1alpha1.MCPServer, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: clip.Cut(msg, maxMessage, runstatus.CutMark), ObservedGeneration: s.Generation})
	s.Status.ObservedGeneration = s.Generation
}

// statusTools is what status says of the tools offered: those include
// names (all when it names none), the first MaxMCPServerTools of them,
// with how many there are and which names of include are not offered.
func statusTools(offered []*mcp.Tool, include []string) (tools []v1alpha1.MCPServerTool, count int32, missing []string) {
	seen := map[string]bool{}
	for _, t := range offered {
		if len(include) > 0 && !slices.Contains(include, t.Name) {
			continue
		}
		// Status keys the tools by name, cut as the API allows: a name
		// listed twice (or two cut alike) counts once, the first.
		name := clip.Head(t.Name, 256)
		if seen[name] {
			continue
		}
		seen[name] = true
		count++
		if len(tools) == v1alpha1.MaxMCPServerTools {
			continue
		}
		st := v1alpha1.MCPServerTool{Name: name, Description: clip.Cut(t.Description, v1alpha1.MaxMCPToolDescription, runstatus.CutMark),
			InputSchemaDigest: schemaDigest(t.InputSchema)}
		if h := mcptool.HintsFrom(t.Annotations); h.Annotated {
			st.ReadOnlyHint, st.DestructiveHint = &h.ReadOnly, &h.Destructive
		}
		tools = append(tools, st)
	}
	for _, name := range include {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	return tools, count, missing
}

// schemaDigest is "sha256:" and the hex SHA-256 of the schema as JSON, or
// "" for none.
func schemaDigest(schema any) string {
	if schema == nil {
		return ""
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
