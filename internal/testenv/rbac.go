package testenv

import (
	"context"
	"fmt"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Authorized waits, up to within, until the API server lets who (a
// SubjectAccessReview's user and groups) do everything rules grant in
// namespace ns, or everywhere when ns is empty. The RBAC authorizer learns
// of a new binding from a watch, so a request sent just after the binding
// was created can still be refused; a test that binds a role calls this
// before acting as that subject. Rules naming single objects are left out;
// rules that grant nothing else (an aggregated role that no
// controller-manager has filled, say) are an error, not an empty wait.
func Authorized(ctx context.Context, c client.Client, who authzv1.SubjectAccessReviewSpec, ns string,
	rules []rbacv1.PolicyRule, within time.Duration) error {
	var asks []authzv1.ResourceAttributes
	for _, r := range rules {
		if len(r.ResourceNames) > 0 {
			continue
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					asks = append(asks, authzv1.ResourceAttributes{Namespace: ns, Verb: v, Group: g, Resource: res})
				}
			}
		}
	}
	if len(asks) == 0 {
		return fmt.Errorf("the rules grant %s nothing on a resource to wait for", who.User)
	}
	missing := ""
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		for _, a := range asks {
			review := &authzv1.SubjectAccessReview{Spec: who}
			review.Spec.ResourceAttributes = &a
			if err := c.Create(ctx, review); err != nil || !review.Status.Allowed {
				missing = fmt.Sprintf("%s %s.%s (%v)", a.Verb, a.Resource, a.Group, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the API server does not yet allow %s %v in %q what it was granted: %s: %w",
			who.User, who.Groups, ns, missing, err)
	}
	return nil
}
