package runclient

import (
	"encoding/json"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// CancelPatch is the merge patch that cancels a run (spec.cancel) and
// says who did (v1alpha1.AnnotationCancelledBy, which the run's reason
// quotes): one request, with no read before it.
func CancelPatch(by string) client.Patch {
	body, _ := json.Marshal(map[string]any{ // a map of strings always marshals
		"metadata": map[string]any{"annotations": map[string]string{v1alpha1.AnnotationCancelledBy: by}},
		"spec":     map[string]any{"cancel": true},
	})
	return client.RawPatch(types.MergePatchType, body)
}

// APIMessage is the API server's own message of a refusal (its Status),
// without the request around it, or err's text for any other error.
func APIMessage(err error) string {
	var s apierrors.APIStatus
	if errors.As(err, &s) {
		return s.Status().Message
	}
	return err.Error()
}
