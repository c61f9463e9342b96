-- Migration 3: the trace context a task was scheduled with (DESIGN.md, "Deliveries to other
-- systems"): the caller's W3C traceparent, 55 characters, NULL for an untraced task (which
-- then costs nothing more than a NULL bit); the fire's span links to it. It lives and dies
-- with the task's row: a completed, cancelled or purged task takes it along, and a new
-- schedule of the id sets it (or clears it). A node of the previous release does not name the
-- column: its tasks are untraced, and a task it schedules again keeps the previous schedule's
-- trace until the id is scheduled by this release.
ALTER TABLE {schema}.tasks ADD COLUMN traceparent text;
