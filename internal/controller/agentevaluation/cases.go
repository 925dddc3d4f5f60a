package agentevaluation

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// readCases reads spec.casesFrom's ConfigMap into status.casesFrom, once:
// an evaluation runs the cases it read when it started, whatever becomes
// of the ConfigMap. s.casesRead says what it found; an error is a read to
// try again.
func (r *Reconciler) readCases(ctx context.Context, s *scope) error {
	e := s.eval
	if e.Spec.CasesFrom == nil || len(e.Status.CasesFrom) > 0 {
		return nil
	}
	ref := e.Spec.CasesFrom.ConfigMapKeyRef
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: ref.Name}, cm)
	switch {
	case apierrors.IsNotFound(err):
		s.casesRead = &condition{reason: v1alpha1.ReasonCasesNotFound,
			message: fmt.Sprintf("ConfigMap %s does not exist in namespace %s: no run is made until it does", ref.Name, e.Namespace)}
		return nil
	case err != nil:
		s.runs = nil // nothing is written from a half-read
		return fmt.Errorf("reading the ConfigMap %s of %s: %w", ref.Name, e.Name, err)
	}
	data, ok := cm.Data[ref.Key]
	if !ok {
		s.casesRead = &condition{reason: v1alpha1.ReasonCasesNotFound,
			message: fmt.Sprintf("ConfigMap %s has no key %s: no run is made until it does", ref.Name, ref.Key)}
		return nil
	}
	cases, err := evaluation.ReadCases(r.Validator, e, data)
	switch {
	case errors.Is(err, evaluation.ErrCasesInvalid):
		s.casesRead = &condition{reason: v1alpha1.ReasonCasesInvalid,
			message: fmt.Sprintf("ConfigMap %s key %s: %v; no run is made until it is corrected", ref.Name, ref.Key, err)}
		return nil
	case err != nil:
		s.runs = nil
		return fmt.Errorf("checking the cases of ConfigMap %s: %w", ref.Name, err)
	}
	e.Status.CasesFrom = cases
	s.casesRead = &condition{ok: true, reason: v1alpha1.ReasonCasesRead,
		message: fmt.Sprintf("read %d cases from ConfigMap %s key %s", len(cases), ref.Name, ref.Key)}
	return nil
}
