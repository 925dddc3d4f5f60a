-- +goose Up
-- The cost and the tokens as numbers, so that SQL can add them up (what a
-- namespace spent last month). cost_usd was the status's decimal string;
-- each record keeps its value, now numeric. A record without a cost (''
-- or a string that is not a decimal) gets NULL: the status, kept whole,
-- still says what it held. The tokens are read from the status's usage.
ALTER TABLE agentrun_runs
	ALTER COLUMN cost_usd DROP DEFAULT,
	ALTER COLUMN cost_usd DROP NOT NULL,
	ALTER COLUMN cost_usd TYPE numeric
		USING CASE WHEN cost_usd ~ '^[0-9]+(\.[0-9]+)?$' THEN cost_usd::numeric END,
	ADD COLUMN input_tokens  bigint NOT NULL DEFAULT 0,
	ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;

UPDATE agentrun_runs SET
	input_tokens = CASE WHEN jsonb_typeof(status->'usage'->'inputTokens') = 'number'
		THEN (status->'usage'->>'inputTokens')::numeric::bigint ELSE 0 END,
	output_tokens = CASE WHEN jsonb_typeof(status->'usage'->'outputTokens') = 'number'
		THEN (status->'usage'->>'outputTokens')::numeric::bigint ELSE 0 END
WHERE status->'usage' IS NOT NULL;
