package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	apiServer := []netip.AddrPort{netip.MustParseAddrPort("10.96.0.1:443"), netip.MustParseAddrPort("203.0.113.10:6443")}
	cases := []struct {
		addr   string
		policy Policy
		reason string // "" means allowed
	}{
		{addr: "93.184.215.14:443"},
		{addr: "[2606:4700::1111]:443"},
		{addr: "127.0.0.1:80", reason: "loopback address"},
		{addr: "127.8.9.10:80", reason: "loopback address"},
		{addr: "[::1]:80", reason: "loopback address"},
		{addr: "169.254.169.254:80", reason: "cloud metadata address"},
		{addr: "169.254.170.2:80", reason: "link-local address"},
		{addr: "[fe80::1]:80", reason: "link-local address"},
		{addr: "[fe80::1%eth0]:80", reason: "link-local address"},
		{addr: "0.0.0.0:80", reason: "unspecified address"},
		{addr: "0.1.2.3:80", reason: "unspecified address"},
		{addr: "[::]:80", reason: "unspecified address"},
		{addr: "224.0.0.1:80", reason: "multicast address"},
		{addr: "[ff02::1]:80", reason: "multicast address"},
		{addr: "255.255.255.255:80", reason: "reserved address"},
		{addr: "10.1.2.3:80", reason: "private address"},
		{addr: "172.16.0.1:80", reason: "private address"},
		{addr: "172.31.255.255:80", reason: "private address"},
		{addr: "172.32.0.1:80"},
		{addr: "192.168.1.1:80", reason: "private address"},
		{addr: "100.64.0.1:80", reason: "private address"},
		{addr: "[fc00::1]:80", reason: "private address"},
		{addr: "[fd12:3456::1]:80", reason: "private address"},
		{addr: "[fd00:ec2::254]:80", reason: "cloud metadata address"},
		{addr: "100.100.100.200:80", reason: "cloud metadata address"},
		// IPv4-mapped IPv6 and NAT64 forms are their IPv4 address.
		{addr: "[::ffff:127.0.0.1]:80", reason: "loopback address"},
		{addr: "[::ffff:169.254.169.254]:80", reason: "cloud metadata address"},
		{addr: "[::ffff:10.0.0.1]:80", reason: "private address"},
		{addr: "[::ffff:93.184.215.14]:80"},
		{addr: "[64:ff9b::a9fe:a9fe]:80", reason: "cloud metadata address (the NAT64 form of 169.254.169.254)"},
		{addr: "[64:ff9b::7f00:1]:80", reason: "loopback address (the NAT64 form of 127.0.0.1)"},
		// allowPrivate opens the private ranges, not the rest, and not the
		// metadata addresses in them.
		{addr: "10.1.2.3:80", policy: Policy{AllowPrivate: true}},
		{addr: "[fd12::1]:80", policy: Policy{AllowPrivate: true}},
		{addr: "100.64.0.1:80", policy: Policy{AllowPrivate: true}},
		{addr: "[fd00:ec2::254]:80", policy: Policy{AllowPrivate: true}, reason: "cloud metadata address"},
		{addr: "100.100.100.200:80", policy: Policy{AllowPrivate: true}, reason: "cloud metadata address"},
		{addr: "169.254.169.254:80", policy: Policy{AllowPrivate: true}, reason: "cloud metadata address"},
		{addr: "127.0.0.1:80", policy: Policy{AllowPrivate: true}, reason: "loopback address"},
		// The allow-list opens what it holds; the metadata addresses and the
		// API server only when listed exactly.
		{addr: "127.0.0.1:80", policy: Policy{Allow: Loopback}},
		{addr: "[::1]:80", policy: Policy{Allow: Loopback}},
		{addr: "[::ffff:127.0.0.1]:80", policy: Policy{Allow: Loopback}},
		{addr: "10.1.2.3:80", policy: Policy{Allow: prefixes("10.1.0.0/16")}},
		{addr: "10.2.0.1:80", policy: Policy{Allow: prefixes("10.1.0.0/16")}, reason: "private address"},
		{addr: "169.254.1.1:80", policy: Policy{Allow: prefixes("169.254.0.0/16")}},
		{addr: "169.254.169.254:80", policy: Policy{Allow: prefixes("169.254.0.0/16")}, reason: "cloud metadata address"},
		{addr: "169.254.169.254:80", policy: Policy{Allow: prefixes("169.254.169.254/32")}},
		{addr: "[fd00:ec2::254]:80", policy: Policy{Allow: prefixes("fd00:ec2::254/128")}},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer}, reason: "the Kubernetes API server"},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, AllowPrivate: true}, reason: "the Kubernetes API server"},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, Allow: prefixes("10.0.0.0/8")}, reason: "the Kubernetes API server"},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, Allow: prefixes("10.96.0.1")}},
		{addr: "10.96.0.1:80", policy: Policy{Protected: apiServer, AllowPrivate: true}},
		{addr: "203.0.113.10:6443", policy: Policy{Protected: apiServer}, reason: "the Kubernetes API server"},
		{addr: "[::ffff:203.0.113.10]:6443", policy: Policy{Protected: apiServer}, reason: "the Kubernetes API server"},
		{addr: "203.0.113.10:443", policy: Policy{Protected: apiServer}},
		// A grant (an AgentRunPolicy's spec.egress) opens what it holds and
		// the private ranges, as the operator's flags do, but never the
		// metadata addresses nor the API server, even listed exactly.
		{addr: "127.0.0.1:80", policy: Policy{Grant: Grant{Allow: Loopback}}},
		{addr: "10.1.2.3:80", policy: Policy{Grant: Grant{Allow: prefixes("10.1.0.0/16")}}},
		{addr: "10.2.0.1:80", policy: Policy{Grant: Grant{Allow: prefixes("10.1.0.0/16")}}, reason: "private address"},
		{addr: "10.2.0.1:80", policy: Policy{Grant: Grant{AllowPrivate: true}}},
		{addr: "127.0.0.1:80", policy: Policy{Grant: Grant{AllowPrivate: true}}, reason: "loopback address"},
		{addr: "169.254.169.254:80", policy: Policy{Grant: Grant{Allow: prefixes("169.254.169.254/32")}}, reason: "cloud metadata address"},
		{addr: "169.254.169.254:80", policy: Policy{Grant: Grant{Allow: prefixes("0.0.0.0/0")}}, reason: "cloud metadata address"},
		{addr: "[fd00:ec2::254]:80", policy: Policy{Grant: Grant{Allow: prefixes("fd00:ec2::254"), AllowPrivate: true}}, reason: "cloud metadata address"},
		{addr: "100.100.100.200:80", policy: Policy{Grant: Grant{Allow: prefixes("100.100.100.200")}}, reason: "cloud metadata address"},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, Grant: Grant{Allow: prefixes("10.96.0.1")}}, reason: "the Kubernetes API server"},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, Grant: Grant{AllowPrivate: true}}, reason: "the Kubernetes API server"},
		{addr: "10.96.0.1:80", policy: Policy{Protected: apiServer, Grant: Grant{Allow: prefixes("10.96.0.0/12")}}},
		// The operator's exact entry still opens them under a grant.
		{addr: "169.254.169.254:80", policy: Policy{Allow: prefixes("169.254.169.254"), Grant: Grant{Allow: prefixes("10.0.0.0/8")}}},
		{addr: "10.96.0.1:443", policy: Policy{Protected: apiServer, Allow: prefixes("10.96.0.1"), Grant: Grant{AllowPrivate: true}}},
	}
	for _, c := range cases {
		err := c.policy.Check(netip.MustParseAddrPort(c.addr))
		var refused *RefusedError
		switch {
		case c.reason == "" && err != nil:
			t.Errorf("%s with %+v: refused (%v), want allowed", c.addr, c.policy, err)
		case c.reason != "" && !errors.As(err, &refused):
			t.Errorf("%s with %+v: %v, want refused: %s", c.addr, c.policy, err, c.reason)
		case c.reason != "" && refused.Reason != c.reason:
			t.Errorf("%s with %+v: refused as %q, want %q", c.addr, c.policy, refused.Reason, c.reason)
		}
	}
}

func TestRefusedError_saysWhatAndHowToAllowIt(t *testing.T) {
	var p Policy
	for addr, want := range map[string]string{
		"169.254.1.1:80": "egress to 169.254.1.1:80 refused: link-local address (the operator's egress policy; allow it with --egress-allow-cidrs, " +
			"or per namespace with an AgentRunPolicy's spec.egress.allowCIDRs)",
		"10.0.0.1:8080": "egress to 10.0.0.1:8080 refused: private address (the operator's egress policy; allow it with --egress-allow-private " +
			"or --egress-allow-cidrs, or per namespace with an AgentRunPolicy's spec.egress.allowPrivate or allowCIDRs)",
		"169.254.169.254:80": "egress to 169.254.169.254:80 refused: cloud metadata address " +
			"(the operator's egress policy; allow it with --egress-allow-cidrs=169.254.169.254/32)",
		"[fd00:ec2::254]:80": "egress to [fd00:ec2::254]:80 refused: cloud metadata address " +
			"(the operator's egress policy; allow it with --egress-allow-cidrs=fd00:ec2::254/128)",
	} {
		if err := p.Check(netip.MustParseAddrPort(addr)); err == nil || err.Error() != want {
			t.Errorf("%s: %v\nwant %s", addr, err, want)
		}
	}
}

func TestParseCIDRs(t *testing.T) {
	got, err := ParseCIDRs(" 10.1.2.3/16, 192.0.2.7 ,, ::ffff:172.16.0.0/108, fd00::1")
	if err != nil {
		t.Fatal(err)
	}
	want := prefixes("10.1.0.0/16", "192.0.2.7/32", "172.16.0.0/12", "fd00::1/128")
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "example.com", "10.0.0.0/8,nope"} {
		if _, err := ParseCIDRs(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

func TestAPIServer(t *testing.T) {
	env := map[string]string{"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
	got, err := APIServer(context.Background(), "https://10.96.0.1:443", func(k string) string { return env[k] })
	if err != nil || !slices.Equal(got, []netip.AddrPort{netip.MustParseAddrPort("10.96.0.1:443")}) {
		t.Errorf("in cluster: %v, %v", got, err)
	}
	got, err = APIServer(context.Background(), "https://[::ffff:203.0.113.10]", func(string) string { return "" })
	if err != nil || !slices.Equal(got, []netip.AddrPort{netip.MustParseAddrPort("203.0.113.10:443")}) {
		t.Errorf("default port: %v, %v", got, err)
	}
	got, err = APIServer(context.Background(), "localhost:6443", func(string) string { return "" })
	if err != nil || !slices.Contains(got, netip.MustParseAddrPort("127.0.0.1:6443")) {
		t.Errorf("a name is resolved: %v, %v", got, err)
	}
}

// A name is checked by the address it resolves to, when the connection
// is made: localhost is refused as loopback.
func TestTransport_refusesAtDialTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	refused := &http.Client{Transport: (&Policy{}).Transport()}
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/"} {
		_, err := refused.Get(u)
		var re *RefusedError
		if !errors.As(err, &re) || re.Reason != "loopback address" {
			t.Fatalf("GET %s: %v, want a refusal of a loopback address", u, err)
		}
		if !strings.Contains(err.Error(), "egress to ") || !strings.Contains(err.Error(), ":"+port+" refused: loopback address") {
			t.Errorf("GET %s: %v", u, err)
		}
	}

	allowed := &http.Client{Transport: (&Policy{Allow: Loopback}).Transport()}
	for _, u := range []string{srv.URL, "http://localhost:" + port + "/"} {
		res, err := allowed.Get(u)
		if err != nil {
			t.Fatalf("GET %s with loopback allowed: %v", u, err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if string(body) != "ok" {
			t.Errorf("GET %s: %q", u, body)
		}
	}
}

func TestGrant_Add(t *testing.T) {
	cases := []struct {
		g, h Grant
		want string
	}{
		{want: ""},
		{g: Grant{Allow: prefixes("10.1.2.3/16")}, want: "10.1.0.0/16"},
		{g: Grant{Allow: prefixes("192.0.2.7", "10.0.0.0/8")}, h: Grant{Allow: prefixes("10.0.0.0/8", "::1")},
			want: "10.0.0.0/8,192.0.2.7/32,::1/128"},
		{g: Grant{AllowPrivate: true}, want: ";private"},
		{g: Grant{Allow: prefixes("10.0.0.0/8")}, h: Grant{AllowPrivate: true}, want: "10.0.0.0/8;private"},
	}
	for _, c := range cases {
		got := c.g.Add(c.h)
		if got.String() != c.want {
			t.Errorf("%v + %v = %q, want %q", c.g, c.h, got, c.want)
		}
		if swapped := c.h.Add(c.g); swapped.String() != got.String() {
			t.Errorf("%v + %v = %q, but %q the other way round", c.g, c.h, got, swapped)
		}
		if got.IsZero() != (c.want == "") {
			t.Errorf("%q: IsZero is %v", c.want, got.IsZero())
		}
	}
}

// A policy with a grant added allows the operator's entries and the
// grant's; the policy it was made from is unchanged.
func TestPolicy_With(t *testing.T) {
	p := &Policy{Allow: prefixes("192.168.0.0/16")}
	q := p.With(Grant{Allow: Loopback}).With(Grant{AllowPrivate: true})
	for _, addr := range []string{"192.168.1.1:80", "127.0.0.1:80", "10.0.0.1:80"} {
		if err := q.Check(netip.MustParseAddrPort(addr)); err != nil {
			t.Errorf("%s with the grants: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:80", "10.0.0.1:80"} {
		if err := p.Check(netip.MustParseAddrPort(addr)); err == nil {
			t.Errorf("%s: the grant changed the policy it was added to", addr)
		}
	}
}

// Runs with the same grant share one client (one connection pool); a grant
// that opens nothing gets the operator's own; each client dials through
// its own grant.
func TestClients_oneClientPerGrant(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer srv.Close()
	cs := NewClients(&Policy{})
	base := cs.For(Grant{})
	if cs.For(Grant{Allow: []netip.Prefix{}}) != base {
		t.Error("an empty grant has a client of its own")
	}
	loop := cs.For(Grant{Allow: prefixes("::1", "127.0.0.0/8")})
	if loop == base {
		t.Fatal("a grant that opens loopback got the operator's client")
	}
	if again := cs.For(Grant{Allow: prefixes("127.0.0.1/8", "::1", "::1")}); again != loop {
		t.Error("an equal grant, written otherwise, got another client")
	}
	if other := cs.For(Grant{Allow: Loopback, AllowPrivate: true}); other == loop {
		t.Error("a wider grant shares the narrower one's client")
	}
	var refused *RefusedError
	if _, err := base.Get(srv.URL); !errors.As(err, &refused) {
		t.Errorf("the operator's client reached loopback: %v", err)
	}
	res, err := loop.Get(srv.URL)
	if err != nil {
		t.Fatalf("the client of the loopback grant: %v", err)
	}
	_ = res.Body.Close()
}

// The policy the dialer checks is a copy: changing the Policy afterwards
// changes nothing.
func TestDialer_keepsACopy(t *testing.T) {
	p := &Policy{Allow: prefixes("127.0.0.0/8")}
	d := p.Dialer()
	p.Allow[0] = netip.MustParsePrefix("192.0.2.0/24")
	if err := d.Control("tcp4", "127.0.0.1:80", nil); err != nil {
		t.Errorf("the dialer saw the change: %v", err)
	}
	if err := d.Control("tcp4", "not-an-address", nil); err == nil {
		t.Error("an address that is not an IP and port was accepted")
	}
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		if !strings.Contains(p, "/") {
			a := netip.MustParseAddr(p)
			p += "/" + map[bool]string{true: "32", false: "128"}[a.Is4()]
		}
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}
