// Package localeval runs an AgentEvaluation with no cluster: the runs of
// every case and repeat are made from the evaluation's template with the
// case's parameters, as the operator makes them; package localrun runs
// them (job tools as local processes), at most spec.concurrency at once;
// and package evaluation scores each and sums the results into the
// status the operator would write. It backs `agentrun eval`.
package localeval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/config/crd"
	"github.com/agentrun/agentrun/internal/crdcheck"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/localrun"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runclient"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Plan is an evaluation read from its files, each run made and checked
// before any runs: a mistake in a manifest or a case's parameters is
// found before anything is spent.
type Plan struct {
	// Evaluation is the AgentEvaluation, with the CRD's defaults.
	Evaluation *v1alpha1.AgentEvaluation
	runs       []planned
	// dir is where job tools run: the evaluation file's directory.
	dir string
	// judges builds spec.judge's model, reading the files' Secrets.
	judges *kit.Builder
}

// planned is one run of a case, of variant ("" for spec.templateRef).
type planned struct {
	c        *v1alpha1.EvaluationCase
	index    int // evaluation.RunIndex's
	variant  string
	repeat   int32
	manifest *localrun.Manifest
}

// Load reads the evaluation file (exactly one AgentEvaluation, and any
// AgentRunTemplates, v1 Secrets and v1 ConfigMaps) and the files in more,
// of which it reads the AgentRunTemplates, Secrets and ConfigMaps and
// ignores the rest, then makes every run of the evaluation.
func Load(file string, more []string) (*Plan, error) {
	checker, err := localrun.NewChecker()
	if err != nil {
		return nil, err
	}
	evals, err := crdcheck.New(crd.AgentEvaluations, v1alpha1.GroupVersion.Version)
	if err != nil {
		return nil, err
	}
	m := localrun.NewManifest()
	var e *v1alpha1.AgentEvaluation
	err = read(file, func(f io.Reader) error {
		return checker.ReadDocuments(f, m, func(tm metav1.TypeMeta, doc []byte) (bool, error) {
			if tm.APIVersion != v1alpha1.GroupVersion.String() {
				return false, nil
			}
			switch tm.Kind {
			case "AgentEvaluation":
				if e != nil {
					return true, fmt.Errorf("the file holds a second AgentEvaluation (%q came first); agentrun eval runs one", e.Name)
				}
				var derr error
				e, derr = decodeEvaluation(evals, doc)
				return true, derr
			case "AgentRun":
				return true, fmt.Errorf("an evaluation file holds no AgentRun: the evaluation makes its runs from its template")
			}
			return false, nil
		})
	})
	if err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("%s holds no AgentEvaluation (apiVersion %s, kind AgentEvaluation)", file, v1alpha1.GroupVersion)
	}
	for _, path := range more {
		err := read(path, func(f io.Reader) error {
			return checker.ReadDocuments(f, m, func(tm metav1.TypeMeta, _ []byte) (bool, error) {
				templates := tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "AgentRunTemplate"
				other := tm.APIVersion == "v1" && (tm.Kind == "Secret" || tm.Kind == "ConfigMap")
				return !templates && !other, nil // only these are read from a template file
			})
		})
		if err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, err
	}
	for i := range e.Spec.Cases {
		// The API server cannot compile them: they are checked here,
		// before anything is spent.
		if err := evaluation.CheckCalls(&e.Spec.Cases[i].Expect); err != nil {
			return nil, fmt.Errorf("%s: case %s: expect.%w", file, e.Spec.Cases[i].Name, err)
		}
	}
	if from := e.Spec.CasesFrom; from != nil {
		// Read from the files' ConfigMaps, as the operator reads them
		// from the cluster when the evaluation starts.
		ref := from.ConfigMapKeyRef
		data, err := m.ConfigMapReader()(context.Background(), e.Namespace, ref.Name, ref.Key)
		if err != nil {
			return nil, fmt.Errorf("%s: spec.casesFrom: %w", file, err)
		}
		if e.Status.CasesFrom, err = evaluation.ReadCases(evals, e, data); err != nil {
			return nil, fmt.Errorf("%s: spec.casesFrom: ConfigMap %s key %s: %w", file, ref.Name, ref.Key, err)
		}
	}
	p := &Plan{Evaluation: e, dir: dir,
		judges: &kit.Builder{AnyCloudIdentity: true, Secrets: m.SecretReader(), ConfigMaps: m.ConfigMapReader()}}
	// As the operator makes them: case by case, repeat by repeat, each
	// repeat once per variant.
	cases := evaluation.Cases(e)
	for i := range cases {
		c := &cases[i]
		for rep := int32(1); rep <= max(e.Spec.Repeats, 1); rep++ {
			for _, v := range evaluation.Variants(e) {
				labels := map[string]string{v1alpha1.LabelEvaluation: e.Name, v1alpha1.LabelCase: c.Name}
				if v.Name != "" {
					labels[v1alpha1.LabelVariant] = v.Name
				}
				run := &v1alpha1.AgentRun{
					ObjectMeta: metav1.ObjectMeta{Name: evaluation.RunName(e.Name, v.Name, c.Name, rep), Namespace: e.Namespace, Labels: labels},
					Spec:       runclient.FromTemplate(v.TemplateRef.Name, c.Parameters),
				}
				rm, err := checker.WithRun(m, run)
				if err != nil {
					return nil, fmt.Errorf("case %s: %w", c.Name, err)
				}
				p.runs = append(p.runs, planned{c: c, index: evaluation.RunIndex(e, v.Name, i, rep), variant: v.Name, repeat: rep, manifest: rm})
			}
		}
	}
	return p, nil
}

// read opens path for fn, naming the file in fn's error.
func read(path string, fn func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := fn(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// decodeEvaluation checks an AgentEvaluation document as the API server
// checks it on create (the CRD's defaults, schema and CEL rules; unknown
// fields refused) and returns it with those defaults.
func decodeEvaluation(v *crdcheck.Validator, doc []byte) (*v1alpha1.AgentEvaluation, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(doc, &obj); err != nil {
		return nil, err
	}
	var meta struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil || meta.Metadata.Name == "" {
		return nil, fmt.Errorf("metadata.name is required")
	}
	// The schema first (with its defaults) and CEL, as the API server
	// does; then the Go types, unknown fields refused as kubectl's strict
	// field validation refuses them.
	if errs := v.Create(context.Background(), obj); len(errs) > 0 {
		return nil, apierrors.NewInvalid(v1alpha1.GroupVersion.WithKind("AgentEvaluation").GroupKind(), meta.Metadata.Name, errs)
	}
	defaulted, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	e := &v1alpha1.AgentEvaluation{}
	if err := strict(defaulted, e); err != nil {
		return nil, err
	}
	if e.Namespace == "" {
		e.Namespace = "default" // a local evaluation lives in default, as a local run does
	}
	return e, nil
}

func strict(doc []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
}

// Options configure a local evaluation.
type Options struct {
	// Progress receives one line as each run ends; nil discards them.
	Progress io.Writer
	// Stderr receives what a run says beside its stream (a call that
	// would ask a person is declined: nobody is asked).
	Stderr io.Writer
	// TracerProvider receives every run's spans; nil sends none.
	TracerProvider trace.TracerProvider
	// Stop, once closed, ends the runs at their next boundary and starts
	// no more.
	Stop <-chan struct{}
}

// Result is how a local evaluation ended.
type Result struct {
	// Evaluation holds the status the operator would write.
	Evaluation *v1alpha1.AgentEvaluation
	// Reasons are why each failed run failed, by run name.
	Reasons evaluation.Reasons
}

// Run runs the plan's runs, at most spec.concurrency at once, in the
// order of the cases and their repeats, scores each as it ends, and
// returns the evaluation with its status set. Once o.Stop is closed or
// ctx is done no more runs start, and the status says Running with the
// runs not scored. A run whose tools cannot be built is an error; a run
// that misses its case's expectations is not.
func (p *Plan) Run(ctx context.Context, o Options) (*Result, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	e := p.Evaluation.DeepCopy()
	res := &Result{Evaluation: e, Reasons: evaluation.Reasons{}}
	var (
		mu    sync.Mutex
		wg    sync.WaitGroup
		first error
	)
	var judge *evaluation.Judge
	if spec := e.Spec.Judge; spec != nil {
		judge = &evaluation.Judge{Spec: spec}
		var err error
		if judge.Model, judge.Pricing, err = p.judges.Judge(ctx, e.Namespace, &spec.Model); err != nil {
			return nil, fmt.Errorf("spec.judge: %w", err)
		}
	}
	slots := make(chan struct{}, max(e.Spec.Concurrency, 1))
	for i := range p.runs {
		pr := &p.runs[i]
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || stopped(o.Stop) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			var msgs []loop.Message
			st, err := localrun.RunManifest(ctx, pr.manifest, p.dir, localrun.Options{JSON: true, Stdout: io.Discard,
				Stderr: o.Stderr, TracerProvider: o.TracerProvider, Stop: o.Stop, Transcript: func(m []loop.Message) { msgs = m }})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = fmt.Errorf("case %s: %w", pr.c.Name, err)
				}
				return
			}
			run := &v1alpha1.AgentRun{ObjectMeta: pr.manifest.Run.ObjectMeta, Spec: pr.manifest.Run.Spec, Status: st}
			why := evaluation.ScoreWithCalls(&pr.c.Expect, run, evaluation.CallsOf(msgs))
			// Judged under the lock: the judge's ceilings count what its
			// calls recorded before this one.
			r := evaluation.ResultOf(pr.repeat, run, why)
			why, _ = judge.JudgeResult(ctx, e, pr.c, run, pr.index, &r, why) // no Lease: never an error
			evaluation.Record(evaluation.VariantCaseStatus(&e.Status, pr.variant, pr.c.Name), r, why)
			verdict := "passed"
			if why != "" {
				res.Reasons[run.Name] = why
				verdict = "failed: " + why
			}
			fmt.Fprintf(o.Progress, "%s (case %s, repeat %d): %s, %s\n", run.Name, pr.c.Name, pr.repeat, st.Outcome, verdict)
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	evaluation.SetStatus(e, nil, metav1.NewTime(time.Now().UTC().Truncate(time.Second)))
	return res, nil
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
