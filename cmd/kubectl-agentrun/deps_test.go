package main

import (
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
)

// The plugin (and the console it serves) is a client: it reads runs and
// writes answers. Linking the executors and providers made it 1,376
// packages, AWS and Azure SDKs included (issue 44). A client reads a
// run's ceilings through internal/limits, which imports only the API
// types and the pure loop.
func TestPlugin_linksNoExecutorOrProvider(t *testing.T) {
	deps := testenv.Deps(t)
	for _, d := range deps {
		for _, banned := range []string{
			"github.com/agentrun/agentrun/internal/kit",
			"github.com/agentrun/agentrun/internal/tools",
			"github.com/agentrun/agentrun/internal/model",
			"github.com/agentrun/agentrun/internal/controller",
			"github.com/aws/",
			"github.com/Azure/",
		} {
			if d == banned || strings.HasPrefix(d, strings.TrimSuffix(banned, "/")+"/") {
				t.Errorf("kubectl-agentrun links %s", d)
			}
		}
	}
	t.Logf("kubectl-agentrun links %d packages", len(deps))
}
