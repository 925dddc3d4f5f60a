-- +goose Up
-- The record of each finished run, keyed by the run's UID. The columns a
-- listing filters or shows are columns; the spec and status are kept whole
-- as jsonb, and the transcript gzip-compressed (it is most of a record's
-- size, and JSON compresses about tenfold).
CREATE TABLE agentrun_runs (
	uid         text PRIMARY KEY,
	namespace   text NOT NULL,
	name        text NOT NULL,
	template    text NOT NULL DEFAULT '',
	labels      jsonb NOT NULL DEFAULT '{}',
	annotations jsonb NOT NULL DEFAULT '{}',
	created_at  timestamptz NOT NULL,
	finished_at timestamptz NOT NULL,
	outcome     text NOT NULL DEFAULT '',
	reason      text NOT NULL DEFAULT '',
	turns       integer NOT NULL DEFAULT 0,
	cost_usd    text NOT NULL DEFAULT '',
	spec        jsonb,
	status      jsonb,
	transcript  bytea,
	archived_at timestamptz NOT NULL DEFAULT now()
);

-- agentrun archive show NAME: the runs of one name, newest first.
CREATE INDEX agentrun_runs_namespace_name ON agentrun_runs (namespace, name, finished_at DESC);
-- Listing newest first, --since, and expiry.
CREATE INDEX agentrun_runs_finished_at ON agentrun_runs (finished_at);
CREATE INDEX agentrun_runs_outcome ON agentrun_runs (outcome, finished_at);
-- Label selectors with = and in become jsonb containment (@>).
CREATE INDEX agentrun_runs_labels ON agentrun_runs USING gin (labels jsonb_path_ops);
