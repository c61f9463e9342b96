-- Migration 5: the queue's pause on each partition's row as well as in `paused`. A claim
-- locks its partition's row first; a claim that waited for that lock while `pause` held it
-- reads the row as the pause left it (PostgreSQL re-reads a row locked after a wait), but
-- reads every other table as of the moment it started, before the pause committed. So the
-- pause must be on the row itself for such a claim to see it. A node of the previous release
-- does not name the column: it pauses through `paused` alone (which this release reads too).
ALTER TABLE {schema}.partitions ADD COLUMN paused boolean NOT NULL DEFAULT false;
UPDATE {schema}.partitions p SET paused = true
    WHERE EXISTS (SELECT 1 FROM {schema}.paused z WHERE z.queue = p.queue);
