package loop

// The Engine: a run's configuration, compiled once (engine.go's New), and
// what every stage reads of it.

import (
	"context"
	"encoding/json"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Engine is the agent loop for one run's configuration. It holds no run
// state: every step takes the State and an Input and returns an Effect,
// so the same engine serves any number of runs with that configuration,
// and a run can be persisted between any two steps.
type Engine struct {
	// cfg.Model is the active model, one of models.
	cfg Config
	// models are Config.Model then Config.Fallbacks; active is the index
	// of the one cfg.Model holds (State.Model of the run last stepped).
	models    []ModelConfig
	active    int
	clock     func() time.Time
	estimator TokenEstimator
	tools     map[string]*ToolSpec
	rules     []compiledRule
	// vetContext bounds the vetting of one step: Config.vetContext when
	// a rule has a condition (only conditions run long), else nothing.
	vetContext func(ctx context.Context) (context.Context, context.CancelFunc)
	guardrails guardrailSet
	schemas    map[string]*jsonschema.Schema
	// shared compiles the schemas, shared with other engines
	// (WithSchemas); nil compiles them for this engine alone.
	shared  *Schemas
	system  string
	offered []ToolSchema
	goal    Message
	// prefixes are what a ReAct request to each of models starts with
	// (by the same index), when the estimator goes message by message.
	prefixes []requestPrefix
	// perMessage is the estimator when it estimates message by message.
	perMessage MessageEstimator
	// plan runs the plans of a planExecute run.
	plan *planner
	// verify judges final answers, when the run has a verifier.
	verify *verifier
	// context holds requests to the context policy.
	context *contextPolicy
	// output checks the final answers of a run with a typed output.
	output *outputSchema
}

// requestPrefix is the system prompt, the tools and the goal of a ReAct
// request to one model: tokens estimates their input tokens (the
// estimate of a request adds each message's), and fp fingerprints what
// precedes the request's messages.
type requestPrefix struct {
	tokens int64
	fp     promptFP
}

// Option configures an Engine.
type Option func(*Engine)

// WithClock injects the clock (time.Now by default).
func WithClock(now func() time.Time) Option { return func(e *Engine) { e.clock = now } }

// WithSchemas shares the tools' compiled parameter schemas with every
// engine given the same Schemas. Without it, an engine compiles its own.
func WithSchemas(s *Schemas) Option { return func(e *Engine) { e.shared = s } }

// WithEstimator sets the token estimator used for admission. Without one,
// the engine uses ByteEstimator: one token per byte of everything sent
// plus fixed overheads, never below what providers report for ordinary
// text. Estimates are built on the provider's counts (PromptCount) only
// with an estimator that is a MessageEstimator.
func WithEstimator(t TokenEstimator) Option { return func(e *Engine) { e.estimator = t } }

// Config returns the normalised configuration the engine runs. Its Model
// is the model the run last stepped calls: Config.Model, or the fallback
// it moved to.
func (e *Engine) Config() *Config { return &e.cfg }

func (e *Engine) tool(name string) *ToolSpec { return lookupTool(e.tools, name) }

// IdempotencyKey is the key a tool call carries: the run's id and the
// call's id, "<run id>/<call id>" (for the operator, the AgentRun's UID,
// such as "0f8e2c4a-6b1d-4c55-9a7e-2b1f3c4d5e6f/t3-c1"). Two runs never share
// a key, and every attempt of one call (retries, a re-dispatch after a
// restart) sends the same one.
func IdempotencyKey(runID, callID string) string { return runID + "/" + callID }

// outputSchema is what every request carries as Request.Output.
func (e *Engine) outputSchema() json.RawMessage {
	if e.output == nil {
		return nil
	}
	return e.output.compact
}
