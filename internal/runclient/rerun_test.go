package runclient_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/runclient"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The console's Re-run and Cancel name the run they showed by its UID: a
// run created again under the name since is refused, and nothing is
// written; the run shown is acted on.
func TestRerunAndCancel_actOnlyOnTheRunShown(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  func(client.Client, runclient.Ref, types.UID) error
		// did says whether the act wrote: a new run, or spec.cancel.
		did func(*testing.T, client.Client) bool
	}{
		{"rerun", func(c client.Client, ref runclient.Ref, uid types.UID) error {
			_, err := runclient.Rerun(context.Background(), c, runclient.RerunOptions{Run: ref, UID: uid})
			return err
		}, func(t *testing.T, c client.Client) bool {
			var l v1alpha1.AgentRunList
			if err := c.List(context.Background(), &l); err != nil {
				t.Fatal(err)
			}
			return len(l.Items) > 1
		}},
		{"cancel", func(c client.Client, ref runclient.Ref, uid types.UID) error {
			_, err := runclient.Cancel(context.Background(), c, runclient.CancelOptions{Run: ref, UID: uid})
			return err
		}, func(t *testing.T, c client.Client) bool {
			var got v1alpha1.AgentRun
			if err := c.Get(context.Background(), ref.Key(), &got); err != nil {
				t.Fatal(err)
			}
			return got.Spec.Cancel
		}},
	} {
		t.Run(tc.name+" of a run replaced since shown", func(t *testing.T) {
			c, _ := clientWith(t, nil)
			err := tc.act(c, ref, "uid-0")
			var refused *runclient.Refused
			if !errors.As(err, &refused) || refused.Reason != runclient.RunReplaced {
				t.Errorf("err = %v, want a refusal (RunReplaced)", err)
			}
			if tc.did(t, c) {
				t.Error("a refused act wrote")
			}
		})
		t.Run(tc.name+" of the run shown", func(t *testing.T) {
			c, _ := clientWith(t, nil)
			if err := tc.act(c, ref, "uid-1"); err != nil {
				t.Fatal(err)
			}
			if !tc.did(t, c) {
				t.Error("nothing was written")
			}
		})
	}
}
