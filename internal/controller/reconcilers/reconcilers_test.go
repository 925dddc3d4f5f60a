package reconcilers

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// Unset, the clock is time.Now and the uncached reader the client; set,
// both are kept.
func TestDefaulted(t *testing.T) {
	c, other := fake.NewClientBuilder().Build(), fake.NewClientBuilder().Build()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		in         Base
		wantReader client.Reader
		wantNow    func(time.Time) bool
	}{
		{"unset", Base{Client: c}, c, func(got time.Time) bool { return time.Since(got) < time.Minute }},
		{"set", Base{Client: c, APIReader: other, Clock: func() time.Time { return at }}, other, func(got time.Time) bool { return got.Equal(at) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.Defaulted()
			if got.APIReader != tc.wantReader {
				t.Errorf("APIReader = %p, want %p", got.APIReader, tc.wantReader)
			}
			if got.Clock == nil || !tc.wantNow(got.Clock()) {
				t.Errorf("Clock is not the one wanted")
			}
			if got.Client != c {
				t.Errorf("Client changed")
			}
		})
	}
}

// countingReader counts the lists of AgentRunPolicies that reach the
// reader, and holds each for a moment, as a live list under load takes.
type countingReader struct {
	client.Reader
	lists atomic.Int64
}

func (c *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	time.Sleep(10 * time.Millisecond)
	return c.Reader.List(ctx, list, opts...)
}

// Runs that start together share the policy reads; each gets the policies
// that govern its namespace, as its own, and a policy created before a
// caller asks governs it.
func TestPolicyReads_shareTheReadsOfCallersThatAskTogether(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	team := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{"tier": "prod"}}}
	prod := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "prod"},
		Spec: v1alpha1.AgentRunPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "prod"}}}}
	other := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "other"},
		Spec: v1alpha1.AgentRunPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "dev"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(team, prod, other).Build()
	reader := &countingReader{Reader: c}
	var reads PolicyReads

	const callers = 40
	got := make(chan []v1alpha1.AgentRunPolicy, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pols, err := reads.PlatformPolicies(context.Background(), reader, "team")
			if err != nil {
				t.Error(err)
			}
			got <- pols
		}()
	}
	wg.Wait()
	close(got)
	for pols := range got {
		if len(pols) != 1 || pols[0].Name != "prod" {
			t.Fatalf("a caller got %d policies (%v), want prod alone", len(pols), pols)
		}
		// Each caller's copy is its own: no caller sees another's change.
		if tier := pols[0].Spec.NamespaceSelector.MatchLabels["tier"]; tier != "prod" {
			t.Errorf("a caller got selector tier=%q, changed by another caller", tier)
		}
		pols[0].Spec.NamespaceSelector.MatchLabels["tier"] = "changed"
	}
	if n := reader.lists.Load(); n < 1 || n > callers/4 {
		t.Errorf("%d lists for %d callers asking together, want at most %d", n, callers, callers/4)
	}

	// A policy created now governs the next caller.
	late := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: "late"}}
	if err := c.Create(context.Background(), late); err != nil {
		t.Fatal(err)
	}
	pols, err := reads.PlatformPolicies(context.Background(), reader, "team")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pols {
		names = append(names, p.Name)
	}
	if !slices.Equal(names, []string{"late", "prod"}) {
		t.Errorf("after a new policy, the caller got %v, want [late prod]", names)
	}
}
