package job

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// uidRange is the range OpenShift gives a namespace (its annotation
// openshift.io/sa.scc.uid-range, for example 1000680000/10000): under
// restricted-v2 a pod's uids and fsGroup must be in it, or unset for the
// platform to pick from it.
type uidRange struct{ first, size int64 }

func (r uidRange) holds(id *int64) bool {
	return id == nil || (*id >= r.first && *id < r.first+r.size)
}

// restrictedV2 lists what OpenShift's restricted-v2
// SecurityContextConstraints refuse in a pod spec, for a namespace given
// the uid range ns: no privilege, no escalation, every capability dropped
// (NET_BIND_SERVICE the only one that may be added), uids and fsGroup in
// the namespace's range, no SELinux level of the pod's own, RuntimeDefault
// seccomp, no host namespaces, ports or paths, and only the volume types
// it allows.
func restrictedV2(spec *corev1.PodSpec, ns uidRange) []string {
	var out []string
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		out = append(out, "host namespaces")
	}
	allowed := []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
	for _, v := range spec.Volumes {
		kind := ""
		switch {
		case v.ConfigMap != nil:
			kind = "configMap"
		case v.CSI != nil:
			kind = "csi"
		case v.DownwardAPI != nil:
			kind = "downwardAPI"
		case v.EmptyDir != nil:
			kind = "emptyDir"
		case v.Ephemeral != nil:
			kind = "ephemeral"
		case v.PersistentVolumeClaim != nil:
			kind = "persistentVolumeClaim"
		case v.Projected != nil:
			kind = "projected"
		case v.Secret != nil:
			kind = "secret"
		}
		if !slices.Contains(allowed, kind) {
			out = append(out, "volume "+v.Name+" of a type restricted-v2 does not allow")
		}
	}
	if sc := spec.SecurityContext; sc != nil {
		if !ns.holds(sc.RunAsUser) {
			out = append(out, fmt.Sprintf("pod runAsUser %d outside the namespace's range", *sc.RunAsUser))
		}
		if !ns.holds(sc.FSGroup) {
			out = append(out, fmt.Sprintf("pod fsGroup %d outside the namespace's range", *sc.FSGroup))
		}
		if sc.SELinuxOptions != nil {
			out = append(out, "pod seLinuxOptions of its own")
		}
		if p := sc.SeccompProfile; p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault {
			out = append(out, "pod seccomp profile other than runtime/default")
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				out = append(out, c.Name+": a host port")
			}
		}
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			out = append(out, c.Name+": privileged")
		}
		if sc.AllowPrivilegeEscalation != nil && *sc.AllowPrivilegeEscalation {
			out = append(out, c.Name+": allowPrivilegeEscalation")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			out = append(out, c.Name+": capabilities not dropped")
		} else {
			for _, a := range sc.Capabilities.Add {
				if a != "NET_BIND_SERVICE" {
					out = append(out, c.Name+": adds "+string(a))
				}
			}
		}
		if !ns.holds(sc.RunAsUser) {
			out = append(out, fmt.Sprintf("%s: runAsUser %d outside the namespace's range", c.Name, *sc.RunAsUser))
		}
		if sc.SELinuxOptions != nil {
			out = append(out, c.Name+": seLinuxOptions of its own")
		}
		if p := sc.SeccompProfile; p != nil && p.Type != corev1.SeccompProfileTypeRuntimeDefault {
			out = append(out, c.Name+": seccomp profile other than runtime/default")
		}
	}
	return out
}

// Issue 34.1: with AssignedUser a tool pod leaves its uids to the
// platform and passes restricted-v2; with a fixed uid (the default, for
// every other cluster) it does not, and still passes Pod Security
// "restricted" either way.
func TestJobSpec_assignedUserPassesOpenShiftRestrictedV2(t *testing.T) {
	ns := uidRange{first: 1000680000, size: 10000}
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}

	f := newFixture(t)
	fixed := f.start(invocation("t1-c1"))
	if v := restrictedV2(&fixed.Spec.Template.Spec, ns); !slices.ContainsFunc(v, func(s string) bool { return strings.Contains(s, "runAsUser 65532") }) {
		t.Errorf("a pod with the fixed uid 65532 passes restricted-v2 (violations %q): the check checks nothing", v)
	}

	ex, err := New(Config{Client: k8sClient, Logs: f.logs, OperatorImage: operatorImage, PollInterval: 20 * time.Millisecond,
		Now: f.clock.Now, AssignedUser: true, RunAsUser: 4242}, f.run, []Tool{refundTool()})
	if err != nil {
		t.Fatal(err)
	}
	f.ex = ex
	assigned := f.start(invocation("t1-c2")) // created by the API server in a namespace enforcing "restricted"
	ps := &assigned.Spec.Template.Spec
	if v := restrictedV2(ps, ns); len(v) > 0 {
		t.Errorf("the pod fails restricted-v2: %s", strings.Join(v, "; "))
	}
	if sc := ps.SecurityContext; sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("pod security context %+v: want no uid, gid or fsGroup, and runAsNonRoot", sc)
	}
	for _, c := range append(slices.Clone(ps.InitContainers), ps.Containers...) {
		if sc := c.SecurityContext; sc.RunAsUser != nil || sc.RunAsGroup != nil {
			t.Errorf("%s sets its uid or gid (%v, %v); the platform assigns them", c.Name, sc.RunAsUser, sc.RunAsGroup)
		}
	}
	if agg := policy.AggregateCheckResults(eval.EvaluatePod(lv, &assigned.Spec.Template.ObjectMeta, ps)); !agg.Allowed {
		t.Errorf("the pod fails %s: %s: %s", lv, agg.ForbiddenReason(), agg.ForbiddenDetail())
	}
}
