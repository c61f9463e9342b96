-- Migration 3: the W3C trace context a task was scheduled with (delayq's trace links), kept
-- beside the task while it is live and dropped with it. Nullable, so a node of the release
-- before (which neither writes nor reads it) keeps working beside this one during a rolling
-- upgrade: its schedules carry no trace context.
--
-- {schema} is replaced by the quoted schema name.
ALTER TABLE {schema}.tasks ADD COLUMN IF NOT EXISTS traceparent text COLLATE "C";
