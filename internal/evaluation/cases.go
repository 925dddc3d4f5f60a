package evaluation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/crdcheck"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// Cases are the cases e runs: spec.cases, then the cases read from
// spec.casesFrom into status.casesFrom.
func Cases(e *v1alpha1.AgentEvaluation) []v1alpha1.EvaluationCase {
	if len(e.Status.CasesFrom) == 0 {
		return e.Spec.Cases
	}
	return append(append(make([]v1alpha1.EvaluationCase, 0, len(e.Spec.Cases)+len(e.Status.CasesFrom)), e.Spec.Cases...), e.Status.CasesFrom...)
}

// ErrCasesInvalid marks cases that do not parse or are not valid
// (ReadCases), as opposed to a validator that could not run.
var ErrCasesInvalid = errors.New("invalid cases")

// ReadCases reads the cases spec.casesFrom names, data being its key's
// value: a YAML (or JSON) list of cases in the shape of spec.cases, no
// field unknown. They are checked with spec.cases as the API server
// checks spec.cases (v validates AgentEvaluations: unique names, at most
// 100 in all, each field's rules), and returned with the CRD's defaults.
// An error wrapping ErrCasesInvalid says what is wrong, in the words of
// the API server.
func ReadCases(v *crdcheck.Validator, e *v1alpha1.AgentEvaluation, data string) ([]v1alpha1.EvaluationCase, error) {
	var cases []v1alpha1.EvaluationCase
	if err := yaml.UnmarshalStrict([]byte(data), &cases); err != nil {
		return nil, fmt.Errorf("%w: it does not hold a list of cases: %v", ErrCasesInvalid, err)
	}
	if len(cases) == 0 {
		return nil, fmt.Errorf("%w: it holds no cases", ErrCasesInvalid)
	}
	merged := &v1alpha1.AgentEvaluation{ObjectMeta: e.ObjectMeta, Spec: *e.Spec.DeepCopy()}
	merged.Spec.Cases = append(merged.Spec.Cases, cases...)
	merged.ManagedFields = nil
	b, err := json.Marshal(merged)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	obj["apiVersion"], obj["kind"] = v1alpha1.GroupVersion.String(), "AgentEvaluation"
	if errs := v.Create(context.Background(), obj); len(errs) > 0 {
		return nil, fmt.Errorf("%w: its cases follow the %d of spec.cases, from spec.cases[%d]: %v", ErrCasesInvalid, len(e.Spec.Cases), len(e.Spec.Cases), errs.ToAggregate())
	}
	defaulted, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	out := &v1alpha1.AgentEvaluation{}
	if err := json.Unmarshal(defaulted, out); err != nil {
		return nil, err
	}
	read := out.Spec.Cases[len(e.Spec.Cases):]
	for i := range read {
		if err := CheckCalls(&read[i].Expect); err != nil {
			return nil, fmt.Errorf("%w: case %s: expect.%v", ErrCasesInvalid, read[i].Name, err)
		}
	}
	return read, nil
}
