package kit

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// MCPServerRefusal is a serverRef, or an entry's mcp.tools, the run
// cannot use: the MCPServer does not exist (Missing; it may yet be
// created), does not include a tool, or a listed tool's expanded name is
// not a valid or not a unique tool name. The run cannot start.
type MCPServerRefusal struct {
	Msg     string
	Missing bool
}

func (e *MCPServerRefusal) Error() string { return e.Msg }

// MCPToolSeparator joins an entry's name and one of its mcp.tools into
// the name of the run's tool: <entry>__<server tool>, as Claude's SDK
// names MCP tools.
const MCPToolSeparator = "__"

// toolName is what ToolSpec.name's schema allows (model providers
// require it); an expanded name is held to it when the run starts.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// ResolveMCPServers returns run with each mcp tool that names an
// MCPServer (mcp.serverRef) given the server's url, transport, headers,
// oauth and caBundleRef, and each entry that lists several of its tools
// (mcp.tools) made into one tool per listed name, so that what builds
// the run, and the platform's policies (their urls, and the server's
// hints the build reads), see the server, and each listed tool, as they
// see an inline tool. server returns the MCPServer of a name, or nil
// when there is none. run itself is not changed; a run without serverRef
// is returned as it is.
//
// An expanded tool is named <entry>__<tool> (MCPToolSeparator), carries
// the entry's other settings, and has mcp.tool set to the server's tool
// and mcp.tools to that one name: Build then gives it the server's
// description and input schema, and a server that does not offer it is
// the manifest's mistake. The names come from the spec alone, so a run
// built again after a restart has the same tools.
func ResolveMCPServers(run *v1alpha1.AgentRun, server func(name string) (*v1alpha1.MCPServer, error)) (*v1alpha1.AgentRun, error) {
	if !slices.ContainsFunc(run.Spec.Tools, func(t v1alpha1.ToolSpec) bool { return t.MCP != nil && t.MCP.ServerRef != nil }) {
		return run, nil
	}
	out := run.DeepCopy()
	tools := make([]v1alpha1.ToolSpec, 0, len(out.Spec.Tools))
	for i := range out.Spec.Tools {
		t := out.Spec.Tools[i]
		if t.MCP == nil || t.MCP.ServerRef == nil {
			tools = append(tools, t)
			continue
		}
		field := fmt.Sprintf("tools[%d] (%s)", i, t.Name)
		s, err := server(t.MCP.ServerRef.Name)
		switch {
		case err != nil:
			return nil, fmt.Errorf("reading MCPServer %s of %s: %w", t.MCP.ServerRef.Name, field, err)
		case s == nil:
			return nil, &MCPServerRefusal{Msg: fmt.Sprintf("%s: MCPServer %q does not exist in namespace %s", field, t.MCP.ServerRef.Name, run.Namespace),
				Missing: true}
		}
		listed := t.MCP.Tools
		if len(listed) == 0 {
			listed = []string{t.MCP.Tool}
		}
		if inc := s.Spec.IncludeTools; len(inc) > 0 {
			for _, name := range listed {
				if !slices.Contains(inc, name) {
					return nil, &MCPServerRefusal{Msg: fmt.Sprintf("%s: MCPServer %s does not include tool %q; its includeTools are %s",
						field, s.Name, name, strings.Join(inc, ", "))}
				}
			}
		}
		t.MCP.URL, t.MCP.MCPConnection, t.MCP.ServerRef = s.Spec.URL, *s.Spec.MCPConnection.DeepCopy(), nil
		if len(t.MCP.Tools) == 0 {
			tools = append(tools, t)
			continue
		}
		for _, name := range listed {
			e := *t.DeepCopy()
			e.Name = t.Name + MCPToolSeparator + name
			if !toolName.MatchString(e.Name) {
				why := "tool names use only letters, digits, _ and -"
				switch {
				case len(e.Name) > 64:
					why = fmt.Sprintf("it is %d characters long, and tool names have at most 64 (shorten the entry's name, or declare the tool in an entry of its own with mcp.tool)", len(e.Name))
				case strings.Contains(name, "."):
					why += " (MCP tool names may contain dots, a run's tool names may not: declare the tool in an entry of its own with mcp.tool)"
				}
				return nil, &MCPServerRefusal{Msg: fmt.Sprintf("%s: mcp.tools %q makes the tool name %s, which model providers refuse: %s",
					field, name, e.Name, why)}
			}
			e.MCP.Tool, e.MCP.Tools = name, []string{name}
			tools = append(tools, e)
		}
	}
	out.Spec.Tools = tools
	if err := checkToolNames(&out.Spec.AgentSpec); err != nil {
		return nil, &MCPServerRefusal{Msg: err.Error()}
	}
	return out, nil
}

// checkToolNames refuses a spec whose expanded tools collide with
// another tool, or whose rules name a tool the run does not have: the
// API server checks the names against the entries, which it cannot
// expand.
func checkToolNames(spec *v1alpha1.AgentSpec) error {
	names := map[string]string{}
	for _, t := range spec.Tools {
		what := t.Name
		if t.MCP != nil && len(t.MCP.Tools) > 0 {
			what = fmt.Sprintf("%s (from mcp.tools %q)", t.Name, t.MCP.Tool)
		}
		if other, dup := names[t.Name]; dup {
			return fmt.Errorf("tools: the tool name %s is declared twice: as %s and as %s", t.Name, other, what)
		}
		names[t.Name] = what
	}
	has := func(n string) bool { _, ok := names[n]; return ok }
	check := func(field string, list []string, wildcard bool) error {
		for _, n := range list {
			if (wildcard && n == "*") || has(n) {
				continue
			}
			return fmt.Errorf("%s names %s, which is not a tool of the run; the entries with mcp.tools make the tools %s", field, n, expandedNames(spec.Tools))
		}
		return nil
	}
	if p := spec.Policy; p != nil {
		for i, r := range p.Rules {
			if err := check(fmt.Sprintf("policy.rules[%d].tools", i), r.Tools, true); err != nil {
				return err
			}
		}
		if err := check("policy.grants", p.Grants, false); err != nil {
			return err
		}
	}
	for i, g := range spec.Guardrails {
		if err := check(fmt.Sprintf("guardrails[%d].tools", i), g.Tools, true); err != nil {
			return err
		}
	}
	if err := check("budget.perTool", slices.Sorted(maps.Keys(spec.Budget.PerTool)), false); err != nil {
		return err
	}
	if v := spec.Verify; v != nil {
		if err := check("verify.tool", []string{v.Tool}, false); err != nil {
			return err
		}
	}
	return nil
}

// expandedNames lists the names of the tools made from mcp.tools.
func expandedNames(tools []v1alpha1.ToolSpec) string {
	var out []string
	for _, t := range tools {
		if t.MCP != nil && len(t.MCP.Tools) > 0 {
			out = append(out, t.Name)
		}
	}
	return strings.Join(out, ", ")
}
