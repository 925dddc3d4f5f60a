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
package loop
