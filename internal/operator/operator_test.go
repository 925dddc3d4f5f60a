package operator

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/testenv"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
)

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tokenFor returns a token of a new ServiceAccount, bound to a ClusterRole
// allowing get on /metrics when allowed.
func tokenFor(t *testing.T, cs kubernetes.Interface, name string, allowed bool) string {
	t.Helper()
	ctx := context.Background()
	const ns = "default"
	// An earlier pass of the test (go test -count) made the same objects.
	made := func(_ any, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	made(cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
	if allowed {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
		made(cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}))
		b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
		made(cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}))
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// With --metrics-secure the metrics are served over HTTPS, and only to a
// caller the API server authenticates and allows to get /metrics.
func TestRun_secureMetricsNeedAnAuthorizedToken(t *testing.T) {
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// A manager with the operator's metrics options and no controller:
	// the operator TestMain started already drives runs.
	mgr, err := ctrl.NewManager(adminCfg, ctrl.Options{Scheme: testenv.Scheme, Metrics: metricsOptions(Options{MetricsAddr: addr, MetricsSecure: true}),
		HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	})
	cs := kubernetes.NewForConfigOrDie(adminCfg)
	reader := tokenFor(t, cs, "metrics-reader", true)
	stranger := tokenFor(t, cs, "metrics-stranger", false)

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(scheme, token string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String(), nil
	}
	g := NewWithT(t)
	g.Eventually(func() (int, error) { code, _, err := get("https", reader); return code, err }, 30*time.Second, 100*time.Millisecond).
		Should(Equal(http.StatusOK))
	_, body, err := get("https", reader)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(body).To(ContainSubstring("agentrun_"))

	code, _, err := get("https", "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusUnauthorized), "no token")
	code, _, err = get("https", stranger)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusForbidden), "a token without get on /metrics")
	code, _, _ = get("http", reader)
	g.Expect(code).NotTo(Equal(http.StatusOK), "plain HTTP")
}
