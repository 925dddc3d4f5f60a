-- +goose Up
-- The results of each finished AgentEvaluation (phase Passed, Failed or
-- Regressed), keyed by the evaluation's UID: its spec and status kept
-- whole as jsonb, which a later evaluation's spec.baseline compares with
-- once the live one is deleted. The pass rate and the cost are numbers
-- (NULL when the status held none), so that SQL can chart them.
CREATE TABLE agentrun_evaluations (
	uid         text PRIMARY KEY,
	namespace   text NOT NULL,
	name        text NOT NULL,
	finished_at timestamptz NOT NULL,
	phase       text NOT NULL,
	pass_rate   numeric,
	cost_usd    numeric,
	spec        jsonb NOT NULL,
	status      jsonb NOT NULL,
	archived_at timestamptz NOT NULL DEFAULT now()
);

-- spec.baseline's fallback and agentrun archive evaluations: the
-- evaluations of one name, newest first.
CREATE INDEX agentrun_evaluations_namespace_name ON agentrun_evaluations (namespace, name, finished_at DESC);
CREATE INDEX agentrun_evaluations_finished_at ON agentrun_evaluations (finished_at);
