package controller

import (
	"sync"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// The most distinct values each tenant-chosen label of the domain metrics
// takes in one set of them (Metrics: one operator, from start to stop). Namespaces, model names and tool names
// are written by the people who write runs, so each would otherwise grow
// the series without bound; past its bound a new value is reported as
// OtherLabelValue. The first values seen keep their own series, so an
// installation with fewer namespaces, models or tools than the bound sees
// every one of them.
const (
	MaxNamespaceLabelValues = 200
	MaxModelLabelValues     = 50
	MaxToolLabelValues      = 200
	MaxTemplateLabelValues  = 200
	MaxOwnerLabelValues     = 200
	// OtherLabelValue stands for every value past a label's bound.
	OtherLabelValue = "other"
)

// boundedValues hands out label values, at most max distinct ones; any
// further value becomes OtherLabelValue.
type boundedValues struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

func newBoundedValues(max int) *boundedValues {
	return &boundedValues{max: max, seen: map[string]struct{}{}}
}

// value returns v while fewer than max values have been seen (or v is one
// of them), else OtherLabelValue.
func (b *boundedValues) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.max {
		return OtherLabelValue
	}
	b.seen[v] = struct{}{}
	return v
}

// metricLabels bounds the tenant-chosen labels of the domain metrics.
type metricLabels struct {
	namespaces, models, tools, templates, owners *boundedValues
}

func newMetricLabels() *metricLabels {
	return &metricLabels{
		namespaces: newBoundedValues(MaxNamespaceLabelValues),
		models:     newBoundedValues(MaxModelLabelValues),
		tools:      newBoundedValues(MaxToolLabelValues),
		templates:  newBoundedValues(MaxTemplateLabelValues),
		owners:     newBoundedValues(MaxOwnerLabelValues),
	}
}

// run is the namespace, provider and model labels of a run's series: the
// model it calls now, model or the fallback it moved to (status.model).
// The provider is one of the API's enum, bounded by it.
func (l *metricLabels) run(run *v1alpha1.AgentRun) (namespace, provider, model string) {
	m := activeModel(run)
	return l.namespaces.value(run.Namespace), string(m.Provider), l.model(m.Name)
}

// activeModel is the model the run calls now, as status.model says:
// spec.model, or the fallback it moved to.
func activeModel(run *v1alpha1.AgentRun) *v1alpha1.ModelEndpoint {
	i := 0
	if st := run.Status.Model; st != nil {
		i = int(st.Fallbacks)
	}
	return run.Spec.Model.Endpoint(i)
}

func (l *metricLabels) model(name string) string { return l.models.value(name) }

func (l *metricLabels) tool(name string) string { return l.tools.value(name) }

// template is the name of the AgentRunTemplate the run was made from, ""
// for a run written out in full.
func (l *metricLabels) template(run *v1alpha1.AgentRun) string {
	if run.Spec.TemplateRef == nil {
		return ""
	}
	return l.templates.value(run.Spec.TemplateRef.Name)
}

// owner is the owner label of a run's wait for a person: its escalation
// owner (escalationOwner), "" for none.
func (l *metricLabels) owner(owner string) string { return l.owners.value(owner) }
