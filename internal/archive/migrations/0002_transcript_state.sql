-- +goose Up
-- Whether a record holds its run's whole transcript as the operator sealed
-- it: 'Complete'; or, for a record kept without its transcript,
-- 'Incomplete' (a chunk was missing or unreadable) or 'Unsealed' (a chunk
-- the operator did not seal), with the problem that names the chunk.
-- Records written before this migration say '' (not recorded).
ALTER TABLE agentrun_runs
	ADD COLUMN transcript_state   text NOT NULL DEFAULT '',
	ADD COLUMN transcript_problem text NOT NULL DEFAULT '';
