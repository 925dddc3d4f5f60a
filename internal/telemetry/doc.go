// Package telemetry holds AgentRun's OpenTelemetry traces, shared by the
// operator and `agentrun local`: the tracer provider the standard OTEL_*
// environment variables ask for, and spans that follow the GenAI semantic
// conventions.
//
// A run is one trace. Its root span, "invoke_agent <run name>", has a
// span id chosen when the run starts and written down in the run (the
// operator keeps it in status.traceParent as a W3C traceparent). Every
// model call ("chat <model>") and tool call ("execute_tool <tool>") is a
// child of that id, whichever reconcile, worker or operator process makes
// it. The root span itself is emitted once, when the run ends, with the
// recorded start time and the remembered span id: a span that stayed open
// across reconciles would be lost on every restart, and exporters only
// send ended spans anyway.
//
// A run made by another run's tool call (an agent tool) is in that run's
// trace: StartRunUnder takes the call span's traceparent, and the run's
// invoke_agent span is the call span's child.
package telemetry
