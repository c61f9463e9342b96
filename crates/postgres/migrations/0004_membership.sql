-- Migration 4: the cluster's membership (DESIGN.md, "Cluster membership"), as the Redis
-- coordinator keeps it under `<prefix>:{cluster}:` (crates/coordinator/src/postgres/mod.rs).
--
-- cluster: one row.
--   epoch           bumped once per change of the member set (join, leave, removal of the dead)
--   stall_since_ms  while stall_until_ms is ahead: when the silence a stall marker names began
--   stall_until_ms  the marker's end (database clock, ms); NULL: no marker
-- nodes: one row per registered node (`delayq nodes`).
--   deadline_ms     when its heartbeat expires (database clock, ms); the index finds the passed
--                   ones without reading every member (guarantee 12)
--   queues          the queues it serves; NULL: every queue
--
-- Every change of the member set goes through heartbeat() or leave(), which lock the cluster
-- row first: two nodes removing the same dead member bump the epoch once between them. Both
-- announce the new epoch on the channel named by their caller (NOTIFY, delivered at commit).

CREATE TABLE {schema}.cluster (
    id             smallint PRIMARY KEY CHECK (id = 1),
    epoch          bigint NOT NULL DEFAULT 0,
    stall_since_ms bigint,
    stall_until_ms bigint
);
INSERT INTO {schema}.cluster (id) VALUES (1);

CREATE TABLE {schema}.nodes (
    id                text PRIMARY KEY,
    name              text NOT NULL,
    host              text NOT NULL,
    pid               bigint NOT NULL,
    version           text NOT NULL,
    started_ms        bigint NOT NULL,
    last_heartbeat_ms bigint NOT NULL,
    deadline_ms       bigint NOT NULL,
    queues            text[]
);
CREATE INDEX nodes_deadline ON {schema}.nodes (deadline_ms);

-- The database clock in ms and µs.
CREATE FUNCTION {schema}.clock_us() RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
$$;

-- The members as one JSON array, sorted by id: [{"id":..,"queues":[..]|null}, ...].
CREATE FUNCTION {schema}.members() RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('id', id, 'queues', queues) ORDER BY id), '[]'::jsonb)
    FROM {schema}.nodes
$$;

-- Registers or refreshes a node, removes the members whose heartbeat expired (at most
-- max_removed of them per call), bumps the epoch once when the member set changed and
-- announces it on `channel`. The members come back only when the caller does not hold the
-- resulting epoch (held_epoch), after a stall, or when the node was added: an unchanged
-- membership costs one statement and a few bytes.
--
-- A stall is not a death: when this node's own deadline had passed although its row is still
-- there (nobody removed it while it was silent: the database stood still, or this node did),
-- or when its previous heartbeat is stall_gap_ms or more ago (a failover to a standby may
-- have lost the last refreshes), the marker is set for one TTL; while it is set, only members
-- whose deadline passed more than one TTL before the silence began are removed.
CREATE FUNCTION {schema}.heartbeat(
    p_id text, p_name text, p_host text, p_pid bigint, p_version text, p_started_ms bigint,
    p_queues text[], p_ttl_ms bigint, p_floor_epoch bigint, p_previous_ms bigint,
    p_stall_gap_ms bigint, p_held_epoch bigint, p_max_removed int, p_channel text,
    OUT epoch bigint, OUT added boolean, OUT stalled boolean, OUT removed text[],
    OUT now_us bigint, OUT members jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
    own_deadline bigint;
    now_ms bigint;
    silent_since bigint;
    remove_before bigint;
BEGIN
    SELECT * INTO c FROM {schema}.cluster WHERE id = 1 FOR UPDATE;
    now_us := {schema}.clock_us();
    now_ms := now_us / 1000;
    SELECT n.deadline_ms INTO own_deadline FROM {schema}.nodes n WHERE n.id = p_id;
    added := NOT FOUND;
    stalled := (NOT added AND own_deadline < now_ms)
        OR (p_previous_ms > 0 AND now_ms - p_previous_ms >= p_stall_gap_ms);
    INSERT INTO {schema}.nodes AS n
        (id, name, host, pid, version, started_ms, last_heartbeat_ms, deadline_ms, queues)
    VALUES (p_id, p_name, p_host, p_pid, p_version, p_started_ms, now_ms, now_ms + p_ttl_ms, p_queues)
    ON CONFLICT (id) DO UPDATE
        SET last_heartbeat_ms = excluded.last_heartbeat_ms, deadline_ms = excluded.deadline_ms,
            queues = excluded.queues, name = excluded.name;
    IF stalled THEN
        silent_since := CASE WHEN p_previous_ms > 0 THEN p_previous_ms
                             WHEN own_deadline IS NOT NULL THEN own_deadline - p_ttl_ms
                             ELSE now_ms END;
        UPDATE {schema}.cluster
            SET stall_since_ms = silent_since, stall_until_ms = now_ms + p_ttl_ms
            WHERE id = 1;
        c.stall_since_ms := silent_since;
        c.stall_until_ms := now_ms + p_ttl_ms;
    END IF;
    remove_before := now_ms;
    IF c.stall_until_ms IS NOT NULL AND c.stall_until_ms >= now_ms THEN
        remove_before := least(now_ms, c.stall_since_ms - p_ttl_ms);
    END IF;
    WITH passed AS (
        SELECT n.id FROM {schema}.nodes n
        WHERE n.deadline_ms < remove_before AND n.id <> p_id
        ORDER BY n.deadline_ms LIMIT p_max_removed
    ), gone AS (
        DELETE FROM {schema}.nodes n USING passed WHERE n.id = passed.id RETURNING n.id
    )
    SELECT coalesce(array_agg(gone.id ORDER BY gone.id), '{}') INTO removed FROM gone;
    epoch := c.epoch;
    IF added OR cardinality(removed) > 0 THEN
        epoch := greatest(c.epoch, p_floor_epoch) + 1;
        UPDATE {schema}.cluster SET epoch = heartbeat.epoch WHERE id = 1;
        PERFORM pg_notify(p_channel, epoch::text);
    END IF;
    IF added OR stalled OR p_held_epoch IS DISTINCT FROM epoch THEN
        members := {schema}.members();
    END IF;
END
$$;

-- Removes a node (a graceful leave): bumps the epoch and announces it when it was a member.
-- Returns the epoch and the members after it.
CREATE FUNCTION {schema}.leave(p_id text, p_floor_epoch bigint, p_channel text,
    OUT epoch bigint, OUT members jsonb)
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    SELECT * INTO c FROM {schema}.cluster WHERE id = 1 FOR UPDATE;
    epoch := c.epoch;
    DELETE FROM {schema}.nodes n WHERE n.id = p_id;
    IF FOUND THEN
        epoch := greatest(c.epoch, p_floor_epoch) + 1;
        UPDATE {schema}.cluster SET epoch = leave.epoch WHERE id = 1;
        PERFORM pg_notify(p_channel, epoch::text);
    END IF;
    members := {schema}.members();
END
$$;

-- What an observer or a node that heard an announcement reads: the epoch, and the members
-- when the caller does not hold that epoch.
CREATE FUNCTION {schema}.snapshot(p_held_epoch bigint, OUT epoch bigint, OUT now_us bigint,
    OUT members jsonb)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT c.epoch INTO epoch FROM {schema}.cluster c WHERE c.id = 1;
    now_us := {schema}.clock_us();
    IF p_held_epoch IS DISTINCT FROM epoch THEN
        members := {schema}.members();
    END IF;
END
$$;
