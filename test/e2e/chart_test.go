package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/seal"
	"sigs.k8s.io/yaml"
)

// The chart grants the operator exactly the rules that controller-gen
// generates from the controller's +kubebuilder:rbac markers
// (config/rbac/role.yaml), installs exactly the generated CRDs, and the
// approval admission policies and user roles of config/: all are copies
// that `make manifests` refreshes.
func TestChart_rbacAndCRDsAreTheGeneratedOnes(t *testing.T) {
	root := filepath.Join("..", "..")
	same := func(generated, copied string) {
		t.Helper()
		want, err := os.ReadFile(filepath.Join(root, generated))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, copied))
		if err != nil {
			t.Fatalf("%v: run make manifests", err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("%s differs from %s: run make manifests", copied, generated)
		}
	}
	same("config/rbac/role.yaml", "charts/agentrun/files/role.yaml")
	same("config/rbac/aggregated_roles.yaml", "charts/agentrun/files/aggregated_roles.yaml")
	same("config/admission/approval-policy.yaml", "charts/agentrun/files/admission/approval-policy.yaml")
	same("config/admission/approver-identity.yaml", "charts/agentrun/files/admission/approver-identity.yaml")
	same("config/admission/run-spec.yaml", "charts/agentrun/files/admission/run-spec.yaml")
	crds, err := filepath.Glob(filepath.Join(root, "config", "crd", "bases", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, c := range crds {
		name := filepath.Base(c)
		same(filepath.Join("config", "crd", "bases", name), filepath.Join("charts", "agentrun", "crds", name))
	}
}

// helmTemplate renders the chart with helm, built from hack/tools/go.mod as
// `make chart-lint` and the e2e deploy do, and returns its documents.
func helmTemplate(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"tool", "-modfile=hack/tools/go.mod", "helm", "template", "r", "charts/agentrun",
		"--namespace", "agentrun-system", "--kube-version", "1.37.2"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var docs []map[string]any
	for doc := range strings.SplitSeq(string(out), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("helm template printed invalid YAML: %v\n%s", err, doc)
		}
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

// kindsIn lists the namespaces of the operator's own objects (named
// <release>-agentrun-manager) by kind; the chart's user-facing roles
// (viewer, editor, approver) are not the operator's.
func kindsIn(docs []map[string]any) map[string][]string {
	out := map[string][]string{}
	for _, d := range docs {
		md, _ := d["metadata"].(map[string]any)
		ns, _ := md["namespace"].(string)
		if name, _ := md["name"].(string); name != "r-agentrun-manager" {
			continue
		}
		kind, _ := d["kind"].(string)
		out[kind] = append(out[kind], ns)
	}
	return out
}

func managerArgs(t *testing.T, docs []map[string]any) string {
	t.Helper()
	for _, d := range docs {
		if d["kind"] == "Deployment" {
			b, _ := yaml.Marshal(d["spec"])
			return string(b)
		}
	}
	t.Fatal("no Deployment")
	return ""
}

// Installed for listed namespaces, the operator gets a Role and RoleBinding
// in each (the generated rules) and no ClusterRole, and its cache is
// limited to them by --watch-namespaces. By default it is cluster-wide.
func TestChart_watchNamespacesGrantsRolesNotAClusterRole(t *testing.T) {
	scoped := helmTemplate(t, "--set", "watchNamespaces={team-a,team-b}")
	kinds := kindsIn(scoped)
	if len(kinds["ClusterRole"]) != 0 || len(kinds["ClusterRoleBinding"]) != 0 {
		t.Errorf("scoped install makes cluster roles: %v", kinds)
	}
	if want := []string{"team-a", "team-b"}; !slices.Equal(kinds["Role"], want) || !slices.Equal(kinds["RoleBinding"], want) {
		t.Errorf("Roles in %v, RoleBindings in %v; want each in %v", kinds["Role"], kinds["RoleBinding"], want)
	}
	generated, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := yaml.Unmarshal(generated, &want); err != nil {
		t.Fatal(err)
	}
	for _, d := range scoped {
		if md, _ := d["metadata"].(map[string]any); md["name"] != "r-agentrun-manager" {
			continue
		}
		if d["kind"] == "Role" && !reflect.DeepEqual(d["rules"], want["rules"]) {
			t.Errorf("a Role's rules differ from config/rbac/role.yaml: %v", d["rules"])
		}
	}
	if args := managerArgs(t, scoped); !strings.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("the manager is not told its namespaces:\n%s", args)
	}

	all := helmTemplate(t)
	if k := kindsIn(all); len(k["ClusterRole"]) != 1 || len(k["ClusterRoleBinding"]) != 1 {
		t.Errorf("default install: %v, want one ClusterRole and its binding", k)
	}
	args := managerArgs(t, all)
	for _, want := range []string{"--tool-default-requests=cpu=100m,ephemeral-storage=64Mi,memory=128Mi",
		"--tool-default-limits=cpu=1,ephemeral-storage=1Gi,memory=512Mi",
		"--tool-max-resources=cpu=4,ephemeral-storage=10Gi,memory=8Gi", "--tool-network-policy=true"} {
		if !strings.Contains(args, want) {
			t.Errorf("the manager's args lack %s:\n%s", want, args)
		}
	}
	if lent := managerArgs(t, helmTemplate(t, "--set", "cloudIdentity={bedrock,vertex}")); !strings.Contains(lent, "--cloud-identity=bedrock,vertex") {
		t.Errorf("cloudIdentity does not reach the manager:\n%s", lent)
	}
	if strings.Contains(args, "watch-namespaces") || strings.Contains(args, "local-tools") || strings.Contains(args, "cloud-identity") {
		t.Errorf("unexpected flag in the default install:\n%s", args)
	}
}

// By default the operator runs under its NetworkPolicy, whose egress
// allows every address but the cloud metadata services', and it is started
// with the chart's egress policy (nothing private allowed); the values
// reach the manager's flags.
func TestChart_operatorNetworkPolicyByDefaultExcludesMetadata(t *testing.T) {
	docs := helmTemplate(t)
	var policies []map[string]any
	for _, d := range docs {
		if d["kind"] == "NetworkPolicy" {
			policies = append(policies, d)
		}
	}
	if len(policies) != 1 {
		t.Fatalf("default install: %d NetworkPolicies, want the operator's", len(policies))
	}
	spec, _ := policies[0]["spec"].(map[string]any)
	if !reflect.DeepEqual(spec["policyTypes"], []any{"Ingress", "Egress"}) {
		t.Errorf("policyTypes = %v", spec["policyTypes"])
	}
	excepts := map[string][]any{}
	rules, _ := spec["egress"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		if _, ok := rule["ports"]; ok {
			continue
		}
		to, _ := rule["to"].([]any)
		for _, p := range to {
			peer, _ := p.(map[string]any)
			if b, ok := peer["ipBlock"].(map[string]any); ok {
				cidr, _ := b["cidr"].(string)
				except, _ := b["except"].([]any)
				excepts[cidr] = except
			}
		}
	}
	for cidr, want := range map[string][]any{"0.0.0.0/0": {"169.254.169.254/32"}, "::/0": {"fd00:ec2::254/128"}} {
		if got, ok := excepts[cidr]; !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("egress to %s: except %v (present %v), want %v; rules: %v", cidr, got, ok, want, rules)
		}
	}
	if args := managerArgs(t, docs); !strings.Contains(args, "--egress-allow-private=false") || strings.Contains(args, "--egress-allow-cidrs") {
		t.Errorf("default egress flags:\n%s", args)
	}

	args := managerArgs(t, helmTemplate(t, "--set", "egress.allowCIDRs={10.96.0.0/12,169.254.169.254/32}", "--set", "egress.allowPrivate=true"))
	for _, want := range []string{"--egress-allow-private=true", "--egress-allow-cidrs=10.96.0.0/12,169.254.169.254/32"} {
		if !strings.Contains(args, want) {
			t.Errorf("the manager's args lack %s:\n%s", want, args)
		}
	}
	for _, d := range helmTemplate(t, "--set", "networkPolicy.enabled=false") {
		if d["kind"] == "NetworkPolicy" {
			t.Error("networkPolicy.enabled=false still renders a NetworkPolicy")
		}
	}
}

// The admission policies that let the operator give a schedule's runs the
// schedule's author name the release's ServiceAccount, not the one
// config/default installs: otherwise nobody (or somebody else) could.
func TestChart_authorPoliciesNameTheReleasesServiceAccount(t *testing.T) {
	const shipped = "system:serviceaccount:agentrun-system:agentrun-controller-manager"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "system:serviceaccount:agentrun-system:r-agentrun"},
		{[]string{"--set", "serviceAccount.name=ops-bot"}, "system:serviceaccount:agentrun-system:ops-bot"},
	} {
		seen := map[string]bool{}
		for _, d := range helmTemplate(t, tc.args...) {
			md, _ := d["metadata"].(map[string]any)
			name, _ := md["name"].(string)
			if name != "agentrun-author" && name != "agentrun-author-identity" || !strings.HasSuffix(d["kind"].(string), "AdmissionPolicy") {
				continue
			}
			b, _ := yaml.Marshal(d["spec"])
			if !strings.Contains(string(b), tc.want) || strings.Contains(string(b), shipped) {
				t.Errorf("%v: %s %s does not name %s alone:\n%s", tc.args, d["kind"], name, tc.want, b)
			}
			seen[name] = true
		}
		if !seen["agentrun-author"] || !seen["agentrun-author-identity"] {
			t.Errorf("%v: rendered %v; want agentrun-author and agentrun-author-identity", tc.args, seen)
		}
	}
}

// The operator's public keys are readable by every authenticated user and
// nothing else is: one Role grants get on the one ConfigMap the operator
// publishes them in (seal.PublicKeysName of the keys Secret, whatever
// stateKeys.secretName is), bound to system:authenticated, and its rules
// are those config/rbac ships. The operator's own Role lets it create and
// update that ConfigMap.
func TestChart_publicKeysAreReadableByEveryAuthenticatedUser(t *testing.T) {
	type rule = map[string]any
	shipped, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "state_public_keys_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var configRole map[string]any
	if err := yaml.Unmarshal([]byte(strings.Split(string(shipped), "\n---")[0]), &configRole); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"agentrun-state-keys", "team-keys"} {
		docs := helmTemplate(t, "--set", "stateKeys.secretName="+secret)
		name := seal.PublicKeysName(secret)
		byName := map[string]map[string]any{}
		for _, d := range docs {
			md, _ := d["metadata"].(map[string]any)
			n, _ := md["name"].(string)
			byName[d["kind"].(string)+"/"+n] = d
		}
		role, binding := byName["Role/r-agentrun-state-public-keys"], byName["RoleBinding/r-agentrun-state-public-keys"]
		if role == nil || binding == nil {
			t.Fatalf("%s: no Role and RoleBinding r-agentrun-state-public-keys", secret)
		}
		want := []any{rule{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{name}, "verbs": []any{"get"}}}
		if !reflect.DeepEqual(role["rules"], want) {
			t.Errorf("%s: the public keys Role grants %v, want %v", secret, role["rules"], want)
		}
		if secret == "agentrun-state-keys" && !reflect.DeepEqual(configRole["rules"], role["rules"]) {
			t.Errorf("config/rbac grants %v, the chart %v", configRole["rules"], role["rules"])
		}
		subjects := []any{rule{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}}
		if !reflect.DeepEqual(binding["subjects"], subjects) {
			t.Errorf("%s: the public keys Role is bound to %v, want %v", secret, binding["subjects"], subjects)
		}
		operatorRules, _ := byName["Role/r-agentrun-state-keys"]["rules"].([]any)
		for _, w := range []rule{
			{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "resourceNames": []any{name}, "verbs": []any{"get", "update"}},
			{"apiGroups": []any{""}, "resources": []any{"configmaps"}, "verbs": []any{"create"}},
		} {
			if !slices.ContainsFunc(operatorRules, func(r any) bool { return reflect.DeepEqual(r, w) }) {
				t.Errorf("%s: the operator's state-keys Role lacks %v: %v", secret, w, operatorRules)
			}
		}
	}
}
