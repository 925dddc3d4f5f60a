// Package loop is the agent loop of AgentRun: every rule about a turn,
// budgets, vetting, loop detection and outcomes lives here, in plain Go
// with no Kubernetes imports.
//
// A turn is: admission (reserve the next model call's exposure against
// every hard ceiling) -> assemble the prompt (a byte-stable prefix of
// system prompt, tool schemas and goal, then the transcript) -> exactly one
// model call -> loop detection over the proposed calls' canonical
// signatures -> vetting of the whole batch (guardrails, then the first
// matching policy rule, then the irreversible-mutation tightening; ASKs
// wait for a person) -> admission of the approved batch's declared maxima
// -> acting (reads concurrently, then writes one at a time, in proposal
// order) -> observations appended in proposal order. A turn ends by
// appending observations or with one of eight named outcomes; every
// proposed call gets exactly one observation.
//
// The loop is driven as state + input -> state + effect: Engine.Step takes
// a State (a plain JSON-serialisable value) and the Input that answers the
// previous Effect, and says what to do next: call the model, ask a person,
// run calls, or finish. A caller may persist the State between any two
// steps; starting a run is stepping the zero State, so starting and
// resuming are one code path. Runner drives an Engine in-process; the
// operator drives the same Engine one step per reconcile.
//
// Each stage returns what should happen next (stage.go: go on with an
// effect, end the turn, or finish with an outcome and a reason) and
// Engine.Step decides: only engine.go ends a turn or a run. Plan then
// execute (planner), verification (verifier) and the context policy
// (contextPolicy) are collaborators the engine builds in New; each holds
// what it needs.
//
// The files follow a turn's stages, each test beside its file, from the
// engine down to the types every stage reads. No two files refer to each
// other (go run ./hack/loopgraph counts such references):
//
//   - engine.go, at the top: New (compiling the configuration and building
//     the collaborators), Step, the order of a turn's checks (admission,
//     then a reply's: charged, refused, unreadable, an answer, or calls
//     checked for a loop before the tool-call ceiling), what follows a
//     vetted and an observed batch, and the end of a turn and of a run
//     (including Refuse and Abort); defaults.go: the configuration's
//     defaults.
//   - compiled.go: the Engine, a compiled configuration; prompt.go: request
//     assembly; estimate.go: the input estimate behind every reservation.
//   - reply.go: reading a model's answer and charging it; retry.go: model
//     and tool retries; context.go: the context policy (compaction).
//   - canonical.go (call signatures, decoding arguments), detect.go: loop
//     detection.
//   - vetting.go (a batch's verdicts, the stage), verdict.go (compiled
//     rules, guardrails and schemas), approvals.go, outputguard.go.
//   - acting.go (dispatching approved calls), observation.go (a tool's
//     result as the model reads it).
//   - plan.go, plan_accept.go, plan_steps.go, plan_waves.go: plan then
//     execute; verify.go: verified completion.
//   - ceilings.go (the table of ceilings, admission, soft warnings,
//     headroom), budget.go (defaults of the ceilings, reservations),
//     money.go.
//   - types.go (outcomes, the configuration, budgets and policy), model.go
//     (what a Model is asked and answers), tools.go (what a Toolbox is
//     asked and answers), state.go (the resumable State, its plan,
//     verification and context parts included), stage.go (what a stage
//     returns).
//   - run.go, scripted.go, instrument.go, beside the engine: driving an
//     Engine in-process, the scripted model, and the Observer that metrics
//     and traces hang on.
package loop
