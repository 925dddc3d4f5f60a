package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/runstatus"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Metrics is the operator's domain metrics, next to controller-runtime's
// own (reconcile counts, errors and durations, work queue depth). No label
// names a run: every label takes a bounded set of values. namespace is the
// run's; provider and model are its spec.model; tool is a declared tool
// name. The namespace, model and tool values are chosen by the people who
// write runs, so each is bounded (metricLabels): past its bound a new value
// is counted as "other".
//
// The operator builds one set (NewMetrics), gives it to its reconcilers,
// and registers its Collectors with the rest it serves while it runs
// (internal/operator), so that a process can start the operator again.
// A nil *Metrics counts nothing: a reconciler built without one (in a
// test) works the same, unobserved.
type Metrics struct {
	runsFinished, turnsStarted, spend, tokens, toolFailures, retries, refusals, approvals, overrun   *prometheus.CounterVec
	modelCallDuration, toolCallDuration, turnsToCompletion, headroomAtCompletion, verificationTrials *prometheus.HistogramVec
	repeatedIntent                                                                                   prometheus.Histogram
	// The judge of a template's finished runs (judging.go).
	judgeScore *prometheus.HistogramVec
	// The time people take to answer (changes.go's humanWaits, and the
	// hand-off of escalations, handoff.go).
	timeToFirstResponse, timeToDecision *prometheus.HistogramVec

	// inFlight reports the gauges of runs in flight from the informer
	// cache at each scrape, so they are right after a restart and never
	// drift.
	inFlight *runCollector
	// The archive (archive.go).
	archiveWrites, archiveFailures prometheus.Counter
	// Recovered panics (panics.go).
	panics *prometheus.CounterVec
	// Runs no shard drives (shard.go).
	unclaimedRuns *prometheus.GaugeVec
	// Sealed objects the operator will still open, by key (keyuse.go).
	stateKeyObjects *prometheus.GaugeVec

	// labels bounds the tenant-chosen labels; it lives as long as the
	// metrics.
	labels *metricLabels
}

// NewMetrics builds the domain metrics, registered nowhere.
func NewMetrics() *Metrics {
	labels := newMetricLabels()
	// The time-to-human histograms' buckets, in seconds: a minute to a day.
	humanBuckets := []float64{60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400}
	return &Metrics{
		labels: labels,
		runsFinished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "runs_finished_total",
			Help: "Runs that ended, by outcome " + listed(loop.Outcomes) + " and reason (the Succeeded condition's: the outcome, or InvalidConfiguration for an Error caused by the run's manifest or namespace rather than by a defect); template is the AgentRunTemplate the run was made from, empty for a run written out in full.",
		}, []string{"namespace", "provider", "model", "outcome", "reason", "template"}),
		turnsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "turns_total",
			Help: "Turns admitted (each is one model call), by the run's namespace, model provider and model.",
		}, []string{"namespace", "provider", "model"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "spend_usd_total",
			Help: "US dollars charged to runs (model calls as the provider reported them, tool calls at their declared maxCostUSD, lost calls at their reservation), counted as each step is saved, by the run's namespace, model provider and model, and the AgentRunTemplate it was made from (empty for a run written out in full).",
		}, []string{"namespace", "provider", "model", "template"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "tokens_total",
			Help: "Tokens charged to runs, counted as each model call is saved, by the run's namespace, model provider and model, and type (input or output).",
		}, []string{"namespace", "provider", "model", "type"}),
		modelCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "model_call_duration_seconds",
			Help:    "Duration of model call attempts, by provider and model. The provider SDKs' own retries are off: each retry is an attempt of its own, counted in agentrun_retries_total.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320},
		}, []string{"provider", "model"}),
		toolCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "tool_call_duration_seconds",
			Help:    "Duration of tool call attempts, by declared tool name.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900},
		}, []string{"tool"}),
		toolFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "tool_failures_total",
			Help: "Tool call attempts that failed, by declared tool name and kind (Unavailable, Timeout, ExitCode, HTTPStatus, ToolError, InvalidCall, OutcomeUnknown): an Unavailable tool whose retries run out ends its run ToolFailure.",
		}, []string{"tool", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "retries_total",
			Help: "Retries the loop scheduled after a transient failure, by kind (model or tool).",
		}, []string{"kind"}),
		overrun: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "reservation_overrun_usd_total",
			Help: "US dollars model calls billed beyond what they reserved (a provider counting more input than the estimate, within its tolerance), charged to the run all the same, by the run's namespace, model provider and model.",
		}, []string{"namespace", "provider", "model"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "reservation_refusals_total",
			Help: "Runs ended because the next step's reservation did not fit, by ceiling " + listed(append(dimensions(), loop.DimPerTool)) + ".",
		}, []string{"ceiling"}),
		turnsToCompletion: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "turns_to_completion",
			Help:    "Model turns of runs that ended Completed, by model provider and model, and the AgentRunTemplate the run was made from (empty for a run written out in full).",
			Buckets: []float64{1, 2, 3, 5, 8, 13, 21, 34, 55, 100},
		}, []string{"provider", "model", "template"}),
		headroomAtCompletion: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "headroom_at_completion",
			Help:    "The fraction of each ceiling " + listed(dimensions()) + " a run that ended Completed left unused, as status.convergence.headroom shows it.",
			Buckets: []float64{0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1},
		}, []string{"ceiling"}),
		repeatedIntent: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "repeated_intent_depth",
			Help:    "The most times one call signature was proposed in a run, for runs that ended.",
			Buckets: []float64{1, 2, 3, 4, 6, 10},
		}),
		verificationTrials: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "verification_trials",
			Help:    "Trials used by runs with spec.verify that ended, by outcome: for Completed, the trial whose answer the verifier verified (does reflection pay?).",
			Buckets: []float64{1, 2, 3, 4, 5, 7, 10},
		}, []string{"outcome"}),
		judgeScore: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "run_judge_score",
			Help:    "The scores the judge of an AgentRunTemplate (spec.judge) gave the finished runs it sampled, from 1 to 5, by the run's namespace and template, observed once as each judgement is written.",
			Buckets: []float64{1, 2, 3, 4, 5},
		}, []string{"namespace", "template"}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "approvals_total",
			Help: "Answers people gave to calls that asked, by decision (approve, deny, stop, or stale for answers to calls that were not waiting).",
		}, []string{"decision"}),
		timeToFirstResponse: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "time_to_first_response_seconds",
			Help: "How long a person took to first respond to a run that waited for one, by the run's namespace, its escalation owner (empty for none) and kind: " +
				"approval and question (a call that waited for an answer; the first answer, for a call that needs several approvers the first approval), " +
				"or escalation (a run that ended Escalated, until someone acknowledged it). Observed once, when the operator records the response.",
			Buckets: humanBuckets,
		}, []string{"namespace", "owner", "kind"}),
		timeToDecision: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentrun", Name: "time_to_decision_seconds",
			Help: "How long people took to decide what a run waited for, by the run's namespace, its escalation owner (empty for none) and kind: " +
				"approval and question (until the call was decided: approved by as many people as it needs, denied, stopped or answered), " +
				"or escalation (a run that ended Escalated, until someone resolved it). Observed once, when the operator records the decision.",
			Buckets: humanBuckets,
		}, []string{"namespace", "owner", "kind"}),
		inFlight: &runCollector{
			labels: labels,
			runs:   prometheus.NewDesc("agentrun_runs", "Runs that have not ended, by phase (Pending, Running, AwaitingApproval).", []string{"phase"}, nil),
			pending: prometheus.NewDesc("agentrun_pending_approvals",
				"Calls waiting for a person's answer, over all runs.", nil, nil),
			oldest: prometheus.NewDesc("agentrun_pending_approval_oldest_seconds",
				"How long the longest-waiting call has waited for a person, in seconds (0 when none waits).", nil, nil),
			attributed: prometheus.NewDesc("agentrun_outcome_attributions",
				"Ended runs a reviewer attributed an outcome to (the annotation "+v1alpha1.AttributedOutcomeAnnotation+"), by the outcome the run emitted, the one attributed, and whether they agree; over the runs that exist.",
				[]string{"emitted", "attributed", "agree"}, nil),
			judged: prometheus.NewDesc("agentrun_run_judgements",
				"Ended runs the judge of their AgentRunTemplate scored (status.judgement), by the template, the outcome the run emitted, and whether the score agrees with it (a Completed run scored at least minScore, or another outcome scored below it); over the runs that exist.",
				[]string{"template", "emitted", "agree"}, nil),
			unacknowledged: prometheus.NewDesc("agentrun_escalation_unacknowledged_oldest_timestamp_seconds",
				"When the oldest escalation no one has acknowledged began (status.escalation.since, as a Unix time), by the run's namespace and the escalation's owner (empty for none); "+
					"no series where every escalation is acknowledged. time() minus it is how long the oldest has waited.",
				[]string{"namespace", "owner"}, nil),
			overdue: prometheus.NewDesc("agentrun_runs_overdue",
				"Runs with no outcome past their deadline (start, plus maxWallClock, plus approvalTimeout for each call that asked, both as status.limits records them, plus OverdueMargin): the operator should have ended them. By namespace.", []string{"namespace"}, nil),
		},
		archiveWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "archive_writes_total",
			Help: "Run records written to the archive.",
		}),
		archiveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "archive_failures_total",
			Help: "Attempts to write a run's record to the archive that failed; the run is kept and the write is retried.",
		}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "panics_total",
			Help: "Panics the operator recovered from, by where (reconcile: a reconcile of a run; work: a model call, tool call or kit build off the workers). Each is a defect: its stack is in the operator's log.",
		}, []string{"where"}),
		unclaimedRuns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "agentrun", Name: "runs_unclaimed",
			Help: "AgentRuns labelled " + v1alpha1.LabelShard + " that no operator has started (no phase) for longer than the check's grace, by the label's value: " +
				"no replica serves that shard, or its replicas are down. Reported by the operator without --shard.",
		}, []string{"shard"}),
		stateKeyObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "agentrun", Name: "state_key_objects",
			Help: "Sealed objects the operator will still open, by the state key their seal names: the checkpoints, transcript chunks, resolved specs and tool Jobs of runs that have not ended, " +
				"and the chunks and resolved specs of ended runs the archive has not taken yet. A key at 0 may leave the state keys Secret; a key the operator does not hold above 0 strands runs.",
		}, []string{"key"}),
	}
}

// Collectors is every collector of the set, for the operator to register
// with the others it serves (internal/operator's register, the one place
// metrics are registered). A nil set has none.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.archiveWrites, m.archiveFailures, m.runsFinished, m.turnsStarted, m.spend, m.tokens, m.modelCallDuration, m.toolCallDuration, m.toolFailures,
		m.retries, m.refusals, m.overrun, m.turnsToCompletion, m.headroomAtCompletion, m.repeatedIntent, m.judgeScore, m.approvals, m.verificationTrials, m.inFlight,
		m.timeToFirstResponse, m.timeToDecision,
		m.unclaimedRuns, m.stateKeyObjects, m.panics}
}

// OverdueMargin is the slack agentrun_runs_overdue allows a run past the
// latest moment it could end: a save, a requeue, a slow API server.
const OverdueMargin = 5 * time.Minute

// deadline is the latest a run that started can end, and whether it has
// started: its wall clock counts working time only, and each ask waits at
// most approvalTimeout (the asks answered, as status.approvals records
// them, and one waiting now).
func deadline(run *v1alpha1.AgentRun) (time.Time, bool) {
	st := &run.Status
	if st.StartTime == nil {
		return time.Time{}, false
	}
	wall, ask := 15*time.Minute, time.Hour // the CRD's defaults
	if l := st.Limits; l != nil {
		// What the run is admitted by: its template's, or as a platform
		// policy capped or filled it.
		if d := l.Budget.MaxWallClock; d != nil {
			wall = d.Duration
		}
		ask = l.ApprovalTimeout.Duration
	} else {
		if d := run.Spec.Budget.MaxWallClock; d != nil {
			wall = d.Duration
		}
		if d := run.Spec.ApprovalTimeout; d != nil {
			ask = d.Duration
		}
	}
	asks := 0
	for _, a := range st.Approvals {
		if !a.Stale {
			asks++
		}
	}
	if len(st.PendingApprovals) > 0 {
		asks++
	}
	return st.StartTime.Add(wall + time.Duration(asks)*ask + OverdueMargin), true
}

type runCollector struct {
	runs, pending, oldest, overdue, attributed, judged, unacknowledged *prometheus.Desc
	labels                                                             *metricLabels

	mu     sync.Mutex
	reader client.Reader
	now    func() time.Time
}

// watch makes the collector list runs with r (the manager's cache).
func (c *runCollector) watch(r client.Reader, now func() time.Time) {
	c.mu.Lock()
	c.reader, c.now = r, now
	c.mu.Unlock()
}

func (c *runCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.runs
	ch <- c.pending
	ch <- c.oldest
	ch <- c.overdue
	ch <- c.attributed
	ch <- c.judged
	ch <- c.unacknowledged
}

func (c *runCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r, now := c.reader, c.now
	c.mu.Unlock()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list := &v1alpha1.AgentRunList{}
	if err := r.List(ctx, list); err != nil {
		return // the cache is not ready yet: no sample beats a wrong one
	}
	phases := map[v1alpha1.Phase]int{v1alpha1.PhasePending: 0, v1alpha1.PhaseRunning: 0, v1alpha1.PhaseAwaitingApproval: 0}
	pending := 0
	var oldest time.Duration
	overdue := map[string]int{}
	type pair struct{ emitted, attributed v1alpha1.Outcome }
	attributed := map[pair]int{}
	type judgedBy struct {
		template string
		emitted  v1alpha1.Outcome
		agree    bool
	}
	judged := map[judgedBy]int{}
	type owned struct{ namespace, owner string }
	unacknowledged := map[owned]time.Time{}
	t := now()
	for i := range list.Items {
		st := &list.Items[i].Status
		if st.Outcome != "" {
			// The admission policy admits only outcomes; the filter keeps
			// a value written without it from making a series.
			if a := v1alpha1.Outcome(list.Items[i].Annotations[v1alpha1.AttributedOutcomeAnnotation]); isOutcome(a) && isOutcome(st.Outcome) {
				attributed[pair{st.Outcome, a}]++
			}
			if j := st.Judgement; j != nil && j.Agreed != nil && isOutcome(st.Outcome) {
				judged[judgedBy{c.labels.template(&list.Items[i]), st.Outcome, *j.Agreed}]++
			}
			if e := st.Escalation; e != nil && !e.Acknowledged() && list.Items[i].DeletionTimestamp.IsZero() {
				k := owned{c.labels.namespaces.value(list.Items[i].Namespace), c.labels.owner(e.Owner)}
				if at, ok := unacknowledged[k]; !ok || e.Since.Time.Before(at) {
					unacknowledged[k] = e.Since.Time
				}
			}
			continue
		}
		if d, ok := deadline(&list.Items[i]); ok && t.After(d) {
			overdue[c.labels.namespaces.value(list.Items[i].Namespace)]++
		}
		p := st.Phase
		if p == "" {
			p = v1alpha1.PhasePending
		}
		if _, ok := phases[p]; ok {
			phases[p]++
		}
		pending += len(st.PendingApprovals)
		for _, a := range st.PendingApprovals {
			if a.RequestedAt != nil {
				oldest = max(oldest, t.Sub(a.RequestedAt.Time))
			}
		}
	}
	for p, n := range phases {
		ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(n), string(p))
	}
	ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(pending))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
	for p, n := range attributed {
		ch <- prometheus.MustNewConstMetric(c.attributed, prometheus.GaugeValue, float64(n), string(p.emitted), string(p.attributed),
			strconv.FormatBool(p.emitted == p.attributed))
	}
	for k, n := range judged {
		ch <- prometheus.MustNewConstMetric(c.judged, prometheus.GaugeValue, float64(n), k.template, string(k.emitted), strconv.FormatBool(k.agree))
	}
	for ns, n := range overdue {
		ch <- prometheus.MustNewConstMetric(c.overdue, prometheus.GaugeValue, float64(n), ns)
	}
	for k, since := range unacknowledged {
		ch <- prometheus.MustNewConstMetric(c.unacknowledged, prometheus.GaugeValue, float64(since.UnixMilli())/1e3, k.namespace, k.owner)
	}
}

// callMetrics times a run's model and tool calls as they happen, and
// counts the tool calls that fail.
type callMetrics struct {
	m               *Metrics
	provider, model string
}

// calls is the observer that times a run's calls; nil (no observer) for a
// nil m.
func (m *Metrics) calls(provider, model string) loop.Observer {
	if m == nil {
		return nil
	}
	return callMetrics{m: m, provider: provider, model: m.labels.model(model)}
}

func (c callMetrics) ModelCall(ctx context.Context, _ *loop.Request) (context.Context, func(*loop.Reply, error)) {
	start := time.Now()
	return ctx, func(*loop.Reply, error) {
		c.m.modelCallDuration.WithLabelValues(c.provider, c.model).Observe(time.Since(start).Seconds())
	}
}

func (c callMetrics) ToolCall(ctx context.Context, inv loop.Invocation) (context.Context, func(loop.Result)) {
	start := time.Now()
	return ctx, func(res loop.Result) {
		tool := c.m.labels.tool(inv.Tool)
		c.m.toolCallDuration.WithLabelValues(tool).Observe(time.Since(start).Seconds())
		if res.Failure != nil {
			c.m.toolFailures.WithLabelValues(tool, string(res.Failure.Kind)).Inc()
		}
	}
}

// record records what a saved reconcile did: its notes, what it charged
// and, when the run ended, its outcome.
func (m *Metrics) record(c change) {
	if m == nil {
		return
	}
	run := c.run
	ns, provider, model := m.labels.run(run)
	for _, n := range c.notes {
		switch n.Kind {
		case loop.NoteTurnStarted:
			m.turnsStarted.WithLabelValues(ns, provider, model).Inc()
		case loop.NoteApproval:
			m.approvals.WithLabelValues(string(lastDecision(run, n.CallID))).Inc()
		case loop.NoteStaleApproval:
			m.approvals.WithLabelValues("stale").Inc()
		case loop.NoteCostAboveReservation:
			m.overrun.WithLabelValues(ns, provider, model).Add(float64(n.Amount) / 1e12)
		case loop.NoteRetry:
			kind := "tool"
			if n.CallID == "" {
				kind = "model"
			}
			m.retries.WithLabelValues(kind).Inc()
		}
		if n.Ceiling != "" {
			m.refusals.WithLabelValues(string(n.Ceiling)).Inc()
		}
	}
	for _, w := range c.waits {
		m.waited(ns, c.owner, w)
	}
	if c.inputTokens > 0 {
		m.tokens.WithLabelValues(ns, provider, model, "input").Add(float64(c.inputTokens))
	}
	if c.outputTokens > 0 {
		m.tokens.WithLabelValues(ns, provider, model, "output").Add(float64(c.outputTokens))
	}
	if c.spent > 0 {
		m.spend.WithLabelValues(ns, provider, model, m.labels.template(run)).Add(float64(c.spent) / 1e12)
	}
	if !c.ended {
		return
	}
	o := string(run.Status.Outcome)
	m.runsFinished.WithLabelValues(ns, provider, model, o, runstatus.EndReason(&run.Status), m.labels.template(run)).Inc()
	if run.Status.Outcome == v1alpha1.OutcomeCompleted && run.Status.Convergence != nil {
		for ceiling, v := range run.Status.Convergence.Headroom {
			if f, err := strconv.ParseFloat(v, 64); err == nil && isCeiling(ceiling) {
				m.headroomAtCompletion.WithLabelValues(ceiling).Observe(f)
			}
		}
	}
	if s := c.state; s != nil {
		m.repeatedIntent.Observe(float64(s.MaxDepth))
		if s.Outcome == loop.Completed {
			m.turnsToCompletion.WithLabelValues(provider, model, m.labels.template(run)).Observe(float64(s.Usage.Turns))
		}
		if s.Verify != nil {
			m.verificationTrials.WithLabelValues(o).Observe(float64(s.Verify.Trial))
		}
	}
}

// waited observes one wait for a person that ended, in the histogram of
// its first response or of its decision.
func (m *Metrics) waited(namespace, owner string, w humanWait) {
	h := m.timeToFirstResponse
	if w.decision {
		h = m.timeToDecision
	}
	h.WithLabelValues(namespace, m.labels.owner(owner), w.kind).Observe(max(w.took, 0).Seconds())
}

// handedOff observes what an acknowledgement of run's escalation
// changed (handoff.go), once: the status write that recorded it is done.
func (m *Metrics) handedOff(run *v1alpha1.AgentRun, h handoff) {
	if m == nil || run.Status.Escalation == nil {
		return
	}
	ns, owner := m.labels.namespaces.value(run.Namespace), run.Status.Escalation.Owner
	if h.acknowledged {
		m.waited(ns, owner, humanWait{kind: waitEscalation, took: h.firstResponse})
	}
	if h.resolved {
		m.waited(ns, owner, humanWait{kind: waitEscalation, decision: true, took: h.decision})
	}
}

// endedError counts a run the operator ended Error with the status write
// of its own (panicked: the run's reconciles kept panicking).
func (m *Metrics) endedError(run *v1alpha1.AgentRun) {
	if m == nil {
		return
	}
	ns, provider, model := m.labels.run(run)
	m.runsFinished.WithLabelValues(ns, provider, model, string(v1alpha1.OutcomeError), string(v1alpha1.OutcomeError), m.labels.template(run)).Inc()
}

// panicked counts a recovered panic, by where.
func (m *Metrics) panicked(where string) {
	if m == nil {
		return
	}
	m.panics.WithLabelValues(where).Inc()
}

// archiveWrote counts a run record written to the archive.
func (m *Metrics) archiveWrote() {
	if m == nil {
		return
	}
	m.archiveWrites.Inc()
}

// archiveFailed counts a failed attempt to write to the archive.
func (m *Metrics) archiveFailed() {
	if m == nil {
		return
	}
	m.archiveFailures.Inc()
}

// NamespaceLabel is the namespace label of an object in ns, bounded
// (MaxNamespaceLabelValues) with the runs' own: the AgentSchedule metrics
// label by it too. "" for a nil m.
func (m *Metrics) NamespaceLabel(ns string) string {
	if m == nil {
		return ""
	}
	return m.labels.namespaces.value(ns)
}

// unclaimed reports the runs no shard has started, by shard, in place of
// the last report.
func (m *Metrics) unclaimed(counts map[string]int) {
	if m != nil {
		replaceCounts(m.unclaimedRuns, counts)
	}
}

// keyObjects reports the sealed objects by key, in place of the last
// report.
func (m *Metrics) keyObjects(counts map[string]int) {
	if m != nil {
		replaceCounts(m.stateKeyObjects, counts)
	}
}

// replaceCounts sets the gauge to the counts by label value, in place of
// what it held.
func replaceCounts(g *prometheus.GaugeVec, counts map[string]int) {
	g.Reset()
	for label, n := range counts {
		g.WithLabelValues(label).Set(float64(n))
	}
}

// watchRuns makes the gauges of runs in flight read r (the manager's
// cache) at now.
func (m *Metrics) watchRuns(r client.Reader, now func() time.Time) {
	if m == nil {
		return
	}
	m.inFlight.watch(r, now)
}

func lastDecision(run *v1alpha1.AgentRun, callID string) v1alpha1.ApprovalDecision {
	for i := len(run.Status.Approvals) - 1; i >= 0; i-- {
		if a := run.Status.Approvals[i]; a.CallID == callID && !a.Stale {
			return a.Decision
		}
	}
	return "unknown"
}

func isCeiling(name string) bool {
	_, ok := loop.CeilingOf(loop.Dimension(name))
	return ok
}

// isOutcome reports whether o is one of the engine's outcomes (loop.Outcomes).
func isOutcome(o v1alpha1.Outcome) bool { return slices.Contains(loop.Outcomes, loop.Outcome(o)) }

// listed joins names for a metric's help: "(a, b, c)".
func listed[T ~string](names []T) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return "(" + strings.Join(s, ", ") + ")"
}

// dimensions are the ceilings' names, in the table's order.
func dimensions() []loop.Dimension {
	var out []loop.Dimension
	for _, c := range loop.Ceilings() {
		out = append(out, c.Dim)
	}
	return out
}

// judged observes a run's judgement, once it is written.
func (m *Metrics) judged(run *v1alpha1.AgentRun) {
	if m == nil || run.Status.Judgement == nil || run.Status.Judgement.Score == nil {
		return
	}
	m.judgeScore.WithLabelValues(m.labels.namespaces.value(run.Namespace), m.labels.template(run)).Observe(float64(*run.Status.Judgement.Score))
}
