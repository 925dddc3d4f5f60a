// Package egress decides where the operator's own HTTP requests may go.
//
// Model calls, HTTP tools and MCP tools are sent from the operator's pod to
// URLs a tenant writes (spec.model.baseURL, a tool's url). Without a filter
// a run could point one at the cloud's metadata service
// (http://169.254.169.254/...) and read the node's credentials, or at the
// API server or any private service the operator's pod can reach.
//
// A Policy is checked when a connection is made, on the address actually
// dialed (net.Dialer's Control hook, after name resolution), so a name that
// resolves to a refused address, or changes its answer between a check and
// the connection (DNS rebinding), is refused all the same. Refused by
// default:
//
//   - loopback (127.0.0.0/8, ::1), link-local (169.254.0.0/16, fe80::/10),
//     unspecified (0.0.0.0/8, ::), multicast and reserved (240.0.0.0/4)
//     addresses;
//   - private ranges (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
//     100.64.0.0/10, fc00::/7), unless AllowPrivate;
//   - the cloud metadata addresses (169.254.169.254, fd00:ec2::254,
//     100.100.100.200) and the Protected endpoints (the API server's), even
//     with AllowPrivate;
//
// and the same addresses in IPv4-mapped IPv6 form (::ffff:a.b.c.d) or in
// the NAT64 well-known prefix (64:ff9b::a.b.c.d). An address in an Allow
// prefix is allowed whatever its kind, except that the metadata addresses
// and the Protected endpoints are opened only by an entry of exactly that
// address (a /32 or /128), never by a wider range that happens to hold it.
//
// Allow and AllowPrivate are the operator's, for every namespace. A Grant
// adds what the platform opens for the runs of some namespaces (an
// AgentRunPolicy's spec.egress): it opens addresses as Allow and
// AllowPrivate do, but never the metadata addresses nor the Protected
// endpoints, not even by an exact entry. Those two hand out the operator's
// own identity (the node's or the operator's cloud credentials; the API
// server, which sees the operator's network address), which is the
// operator's to lend, not one namespace's. Clients hands out one client per
// distinct grant.
//
// Proxies: Transport keeps http.DefaultTransport's proxy from the
// environment (HTTPS_PROXY, HTTP_PROXY, NO_PROXY). A request sent through a
// proxy connects to the proxy, so the policy checks the proxy's address (a
// proxy on a private address needs an Allow entry); where the proxy then
// connects is the proxy's to filter.
//
// Only connections made through the policy's dialer are checked: the
// operator's Kubernetes client and DNS lookups do not use it.
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Policy says which addresses the operator may connect to. The zero value
// refuses every kind listed in the package documentation and allows public
// addresses.
type Policy struct {
	// Allow are prefixes the administrator opened (--egress-allow-cidrs):
	// an address in one is allowed whatever its kind, except the metadata
	// addresses and the Protected endpoints (see the package
	// documentation). IPv4 prefixes match IPv4-mapped IPv6 addresses too.
	Allow []netip.Prefix
	// AllowPrivate allows the private ranges (--egress-allow-private):
	// 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10 and
	// fc00::/7. The metadata addresses in them stay refused.
	AllowPrivate bool
	// Protected are endpoints refused whatever their address's kind: the
	// Kubernetes API server's (APIServer). Only an Allow entry of exactly
	// the address opens one.
	Protected []netip.AddrPort
	// Grant is what the platform adds for one namespace's runs (With).
	Grant Grant
}

// Grant is what the platform opens for the runs of the namespaces an
// AgentRunPolicy selects (its spec.egress), on top of the operator's
// Allow and AllowPrivate. It never opens the metadata addresses nor the
// Protected endpoints (see the package documentation).
type Grant struct {
	// Allow are prefixes opened whatever their addresses' kind
	// (spec.egress.allowCIDRs).
	Allow []netip.Prefix
	// AllowPrivate opens the private ranges (spec.egress.allowPrivate).
	AllowPrivate bool
}

// Add returns g with h's prefixes and private ranges added, its prefixes
// masked, sorted and without repeats.
func (g Grant) Add(h Grant) Grant {
	out := Grant{AllowPrivate: g.AllowPrivate || h.AllowPrivate}
	for _, pfx := range slices.Concat(g.Allow, h.Allow) {
		out.Allow = append(out.Allow, pfx.Masked())
	}
	slices.SortFunc(out.Allow, func(a, b netip.Prefix) int { return a.Compare(b) })
	out.Allow = slices.Compact(out.Allow)
	return out
}

// IsZero says whether g opens nothing.
func (g Grant) IsZero() bool { return len(g.Allow) == 0 && !g.AllowPrivate }

// String is g in a canonical form: equal grants (after Add) print the same.
func (g Grant) String() string {
	var b strings.Builder
	for i, pfx := range g.Allow {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pfx.String())
	}
	if g.AllowPrivate {
		b.WriteString(";private")
	}
	return b.String()
}

// With returns a copy of p whose grant has g's entries added.
func (p *Policy) With(g Grant) *Policy {
	return &Policy{Allow: slices.Clone(p.Allow), AllowPrivate: p.AllowPrivate, Protected: slices.Clone(p.Protected),
		Grant: p.Grant.Add(g)}
}

// Loopback are the loopback prefixes, for development setups whose model
// and tool servers are fakes on this machine (make dev, hack/scale).
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Metadata are the cloud metadata services' addresses: AWS, GCP, Azure,
// OpenStack and others (169.254.169.254), AWS over IPv6 (fd00:ec2::254),
// Alibaba Cloud (100.100.100.200).
var Metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"),
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	reserved4   = netip.MustParsePrefix("240.0.0.0/4")
	sharedSpace = netip.MustParsePrefix("100.64.0.0/10") // carrier-grade NAT
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
)

// RefusedError is a connection the policy refused.
type RefusedError struct {
	// Addr is the address and port that was to be dialed.
	Addr netip.AddrPort
	// Reason names the address's kind, such as "link-local address".
	Reason string
	// Allow says how an administrator allows it.
	Allow string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("egress to %s refused: %s (the operator's egress policy; allow it with %s)", e.Addr, e.Reason, e.Allow)
}

// How an address's kind is opened: for every namespace by the operator's
// flags, per namespace by an AgentRunPolicy.
const (
	allowCIDRs   = "--egress-allow-cidrs"
	allowKind    = allowCIDRs + ", or per namespace with an AgentRunPolicy's spec.egress.allowCIDRs"
	allowPrivate = "--egress-allow-private or " + allowCIDRs + ", or per namespace with an AgentRunPolicy's spec.egress.allowPrivate or allowCIDRs"
)

// Check returns nil when the policy allows a connection to addr, else a
// *RefusedError.
func (p *Policy) Check(addr netip.AddrPort) error {
	a := addr.Addr().WithZone("").Unmap()
	nat := ""
	if nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte(b[12:]))
		nat = fmt.Sprintf(" (the NAT64 form of %s)", a)
	}
	reason, allow := p.refusal(a, addr.Port())
	if reason == "" {
		return nil
	}
	return &RefusedError{Addr: addr, Reason: reason + nat, Allow: allow}
}

// refusal says why a (unmapped) may not be connected to on port, and how
// to allow it; "" when it may. Only the operator's own exact entry opens a
// metadata address or a Protected endpoint; a grant's never does.
func (p *Policy) refusal(a netip.Addr, port uint16) (reason, allow string) {
	listed, exact := false, false
	for _, pfx := range p.Allow {
		if pfx.Contains(a) {
			listed = true
			exact = exact || pfx.IsSingleIP()
		}
	}
	listed = listed || slices.ContainsFunc(p.Grant.Allow, func(pfx netip.Prefix) bool { return pfx.Contains(a) })
	exactly := fmt.Sprintf("%s=%s/%d", allowCIDRs, a, a.BitLen())
	if slices.Contains(Metadata, a) && !exact {
		return "cloud metadata address", exactly
	}
	for _, ep := range p.Protected {
		if ep.Addr().Unmap() == a && ep.Port() == port && !exact {
			return "the Kubernetes API server", exactly
		}
	}
	if listed {
		return "", ""
	}
	switch {
	case !a.IsValid():
		return "not an IP address", allowKind
	case a.IsLoopback():
		return "loopback address", allowKind
	case a.IsLinkLocalUnicast():
		return "link-local address", allowKind
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return "unspecified address", allowKind
	case a.IsMulticast():
		return "multicast address", allowKind
	case reserved4.Contains(a):
		return "reserved address", allowKind
	case (a.IsPrivate() || sharedSpace.Contains(a)) && !p.AllowPrivate && !p.Grant.AllowPrivate:
		return "private address", allowPrivate
	}
	return "", ""
}

// Control is a net.Dialer Control function: it refuses a connection the
// policy does not allow, after the name was resolved and before the
// connection is made.
func (p *Policy) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("egress to %s (%s) refused: not an IP address and port", address, network)
	}
	return p.Check(ap)
}

// Dialer returns a dialer with http.DefaultTransport's timeouts that
// checks every connection against a copy of p.
func (p *Policy) Dialer() *net.Dialer {
	return &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.With(Grant{}).Control}
}

// Transport returns a transport with http.DefaultTransport's settings
// (proxy from the environment, HTTP/2, the same timeouts) and 1 KiB
// connection buffers, as the model package's default client has (a
// thousand runs waiting on their model hold a connection each), whose
// connections are checked by Dialer. A refused request fails with the
// *RefusedError itself rather than the dial error around it, so that its
// text comes first in the message of whoever reports it.
func (p *Policy) Transport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = p.Dialer().DialContext
	t.ReadBufferSize, t.WriteBufferSize = 1<<10, 1<<10
	return &transport{Transport: t}
}

type transport struct{ *http.Transport }

// WithRootCAs returns a copy of the transport that trusts roots instead
// of the system's roots, with the same policy and settings (a run's CA
// bundle: kit.RootCAsSetter).
func (t *transport) WithRootCAs(roots *x509.CertPool) http.RoundTripper {
	c := t.Clone()
	if c.TLSClientConfig == nil {
		c.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	c.TLSClientConfig.RootCAs = roots
	return &transport{Transport: c}
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.Transport.RoundTrip(req)
	var refused *RefusedError
	if err != nil && errors.As(err, &refused) {
		return nil, refused
	}
	return res, err
}

// ParseCIDRs reads a comma-separated list of CIDRs or single addresses,
// as --egress-allow-cidrs takes it (see ParseCIDR).
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pfx, err := ParseCIDR(f)
		if err != nil {
			return nil, err
		}
		out = append(out, pfx)
	}
	return out, nil
}

// ParseCIDR reads one CIDR, or a single address (a /32 or /128), masked.
// An IPv4-mapped IPv6 prefix (::ffff:10.0.0.0/104) becomes its IPv4 form.
func ParseCIDR(s string) (netip.Prefix, error) {
	var pfx netip.Prefix
	var err error
	if strings.Contains(s, "/") {
		pfx, err = netip.ParsePrefix(s)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(s); err == nil {
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR or an IP address", s)
	}
	if a := pfx.Addr(); a.Is4In6() && pfx.Bits() >= 96 {
		pfx = netip.PrefixFrom(a.Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), nil
}

// APIServer returns the addresses and ports the Kubernetes API server is
// reached at: host (a rest.Config's Host: a URL or host:port) and the
// in-cluster Service, from getenv's KUBERNETES_SERVICE_HOST and
// KUBERNETES_SERVICE_PORT. A host name is resolved now; the error names
// what could not be resolved or parsed, and the addresses returned are the
// rest.
func APIServer(ctx context.Context, host string, getenv func(string) string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	var errs []error
	add := func(hostport string) {
		h, p, err := net.SplitHostPort(hostport)
		port, perr := strconv.ParseUint(p, 10, 16)
		if err != nil || perr != nil {
			errs = append(errs, fmt.Errorf("API server address %q: not a host and port", hostport))
			return
		}
		addrs := []netip.Addr{}
		if a, err := netip.ParseAddr(h); err == nil {
			addrs = append(addrs, a)
		} else {
			ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", h)
			if err != nil {
				errs = append(errs, fmt.Errorf("API server address %q: %w", hostport, err))
			}
			addrs = append(addrs, ips...)
		}
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a.WithZone("").Unmap(), uint16(port))
			if !slices.Contains(out, ap) {
				out = append(out, ap)
			}
		}
	}
	if host != "" {
		u, err := url.Parse(host)
		if err != nil || u.Host == "" {
			u, err = url.Parse("https://" + host)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("API server address %q: %w", host, err))
		} else {
			hp := u.Host
			if u.Port() == "" {
				port := "443"
				if u.Scheme == "http" {
					port = "80"
				}
				hp = net.JoinHostPort(u.Hostname(), port)
			}
			add(hp)
		}
	}
	if h, p := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT"); h != "" && p != "" {
		add(net.JoinHostPort(h, p))
	}
	return out, errors.Join(errs...)
}
