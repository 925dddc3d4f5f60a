-- +goose Up
-- The entries of the runs' memories (spec.memory), each memory kept apart
-- by its namespace and name. key is the entry's key (memory.remember's key,
-- or one the operator made up when the call gave none): writing a key
-- again replaces its entry. An entry past expires_at is neither recalled
-- nor counted, and is deleted by ExpireMemories. search is the full-text
-- index of the key and text, with the english configuration (stemmed, so
-- that "refunds" finds "refund").
CREATE TABLE agentrun_memories (
	namespace  text NOT NULL,
	memory     text NOT NULL,
	key        text NOT NULL,
	text       text NOT NULL,
	run        text NOT NULL DEFAULT '',
	written_at timestamptz NOT NULL,
	expires_at timestamptz NOT NULL,
	search     tsvector GENERATED ALWAYS AS (to_tsvector('english', key || ' ' || text)) STORED,
	PRIMARY KEY (namespace, memory, key)
);

CREATE INDEX agentrun_memories_search ON agentrun_memories USING gin (search);
-- Counting a memory's live entries, and expiry.
CREATE INDEX agentrun_memories_expires_at ON agentrun_memories (namespace, memory, expires_at);
CREATE INDEX agentrun_memories_expiry ON agentrun_memories (expires_at);
