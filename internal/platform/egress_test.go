package platform

import (
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEgress_addsUpThePolicies(t *testing.T) {
	pol := func(name string, e *v1alpha1.PlatformEgress) v1alpha1.AgentRunPolicy {
		return v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.AgentRunPolicySpec{Egress: e}}
	}
	cases := []struct {
		name string
		pols []v1alpha1.AgentRunPolicy
		want string // the grant's String, or the error
	}{
		{name: "no policy", want: ""},
		{name: "no egress", pols: []v1alpha1.AgentRunPolicy{pol("a", nil)}, want: ""},
		{name: "one", pols: []v1alpha1.AgentRunPolicy{pol("a", &v1alpha1.PlatformEgress{AllowCIDRs: []string{"10.96.0.0/12", "192.0.2.7"}})},
			want: "10.96.0.0/12,192.0.2.7/32"},
		{name: "any of them opens", pols: []v1alpha1.AgentRunPolicy{
			pol("a", &v1alpha1.PlatformEgress{AllowCIDRs: []string{"10.96.0.1/12"}}),
			pol("b", &v1alpha1.PlatformEgress{AllowCIDRs: []string{"10.96.0.0/12", "::1"}, AllowPrivate: true}),
		}, want: "10.96.0.0/12,::1/128;private"},
		{name: "a broken entry names its policy", pols: []v1alpha1.AgentRunPolicy{
			pol("a", &v1alpha1.PlatformEgress{AllowCIDRs: []string{"10.0.0.0/8", "db.internal"}}),
		}, want: `AgentRunPolicy a egress.allowCIDRs[1]: "db.internal" is not a CIDR or an IP address`},
	}
	for _, c := range cases {
		g, err := Egress(c.pols)
		got := g.String()
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
