package e2e

import (
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The console is off by default. On, it runs the plugin's console in
// --in-cluster mode under a ServiceAccount that mounts no token and that
// no role binding names: every request is the user's own, with the user's
// token. Its pods meet the restricted profile and are not selected by the
// operator's NetworkPolicy or metrics Service.
func TestChart_consoleRunsWithTheUsersTokenAndNoRightsOfItsOwn(t *testing.T) {
	named := func(docs []map[string]any, kind, name string) map[string]any {
		for _, d := range docs {
			md, _ := d["metadata"].(map[string]any)
			if d["kind"] == kind && md["name"] == name {
				return d
			}
		}
		return nil
	}
	if d := named(helmTemplate(t), "Deployment", "r-agentrun-console"); d != nil {
		t.Fatal("the default install deploys the console")
	}
	docs := helmTemplate(t, "--values", "charts/agentrun/ci/console-values.yaml")
	dep := named(docs, "Deployment", "r-agentrun-console")
	if dep == nil || named(docs, "Service", "r-agentrun-console") == nil || named(docs, "ServiceAccount", "r-agentrun-console") == nil {
		t.Fatal("console.enabled renders no console Deployment, Service and ServiceAccount")
	}
	b, _ := yaml.Marshal(dep["spec"])
	spec := string(b)
	for _, want := range []string{"serviceAccountName: r-agentrun-console", "automountServiceAccountToken: false",
		"- /kubectl-agentrun", "- console", "- --in-cluster", "- --port=9090", "- --api-ca-file=/etc/agentrun-console/ca/ca.crt", "- --state-keys-secret=agentrun-system/agentrun-state-keys",
		"name: kube-root-ca.crt", "runAsNonRoot: true", "type: RuntimeDefault", "allowPrivilegeEscalation: false", "- ALL",
		"app.kubernetes.io/name: agentrun-console"} {
		if !strings.Contains(spec, want) {
			t.Errorf("the console's Deployment lacks %q:\n%s", want, spec)
		}
	}
	if sa := named(docs, "ServiceAccount", "r-agentrun-console"); sa["automountServiceAccountToken"] != false {
		t.Errorf("the console's ServiceAccount mounts a token: %v", sa)
	}
	for _, d := range docs {
		if d["kind"] != "RoleBinding" && d["kind"] != "ClusterRoleBinding" {
			continue
		}
		subjects, _ := yaml.Marshal(d["subjects"])
		if strings.Contains(string(subjects), "console") {
			md, _ := d["metadata"].(map[string]any)
			t.Errorf("%s %v grants the console's ServiceAccount rights: %s", d["kind"], md["name"], subjects)
		}
	}
	tmpl, _ := dep["spec"].(map[string]any)["template"].(map[string]any)
	podLabels, _ := tmpl["metadata"].(map[string]any)["labels"].(map[string]any)
	selects := func(sel map[string]any) bool {
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	for _, d := range docs {
		md, _ := d["metadata"].(map[string]any)
		spec, _ := d["spec"].(map[string]any)
		var sel map[string]any
		switch d["kind"] {
		case "NetworkPolicy":
			ps, _ := spec["podSelector"].(map[string]any)
			sel, _ = ps["matchLabels"].(map[string]any)
		case "Service":
			if md["name"] == "r-agentrun-console" {
				continue
			}
			sel, _ = spec["selector"].(map[string]any)
		}
		if selects(sel) {
			t.Errorf("%s %v selects the console's pods", d["kind"], md["name"])
		}
	}
}
