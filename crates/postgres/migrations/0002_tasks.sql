-- Migration 2: the task store (delayq-storage's PostgresStore) and its queue controls and
-- recurring schedules.
--
-- {schema} is replaced by the quoted schema name. Ids and names are COLLATE "C": ties of equal
-- times are broken by bytes, as the Redis backend's sorted sets and the memory twin break them,
-- whatever the database's default collation.
--
-- Every operation on a partition first locks its row in `partitions` (the Redis backend's
-- atomic script per partition slot), so the rows below change together.

-- queues: the partition count of each queue, recorded the first time it is used.
CREATE TABLE {schema}.queues (
    queue      text COLLATE "C" PRIMARY KEY,
    partitions integer NOT NULL
);

-- partitions: one row per partition that was ever written: its lock, the source of its
-- generations and claim numbers (strictly increasing), and the receipt of its latest claim
-- (recover_claim).
CREATE TABLE {schema}.partitions (
    queue            text COLLATE "C" NOT NULL,
    idx              integer NOT NULL,
    sequence         bigint NOT NULL DEFAULT 0,
    receipt_owner    text,
    receipt_lease_ms bigint,
    receipt_ids      text[] COLLATE "C",
    receipt_claims   bigint[],
    PRIMARY KEY (queue, idx)
);

-- tasks: the live tasks. state pending: at_ms is when it is claimable; inflight: its lease
-- deadline (claim: the fencing number); dead: when it died. due_ms is the due of the current
-- attempt, scheduled_due_ms the due it was scheduled with (the dedup key). generation 0 marks
-- a task cancelled while its handler runs.
CREATE TABLE {schema}.tasks (
    queue            text COLLATE "C" NOT NULL,
    idx              integer NOT NULL,
    id               text COLLATE "C" NOT NULL,
    state            text NOT NULL CHECK (state IN ('pending', 'inflight', 'dead')),
    at_ms            bigint NOT NULL,
    due_ms           bigint NOT NULL,
    scheduled_due_ms bigint NOT NULL,
    attempt          integer NOT NULL,
    generation       bigint NOT NULL,
    claim            bigint,
    payload          bytea NOT NULL,
    last_error       text,
    PRIMARY KEY (queue, idx, id)
);
-- Claims and windows read the due pending tasks of one partition in (at_ms, id) order.
CREATE INDEX tasks_pending_due ON {schema}.tasks (queue, idx, at_ms, id) WHERE state = 'pending';
CREATE INDEX tasks_inflight_lease ON {schema}.tasks (queue, idx, at_ms, id) WHERE state = 'inflight';
CREATE INDEX tasks_dead_failed ON {schema}.tasks (queue, idx, at_ms, id) WHERE state = 'dead';

-- superseded: the lease of a claim whose task was scheduled again while its handler ran; it
-- counts as in flight until that handler reports, its lease runs out, or the id is claimed.
CREATE TABLE {schema}.superseded (
    queue             text COLLATE "C" NOT NULL,
    idx               integer NOT NULL,
    id                text COLLATE "C" NOT NULL,
    claim             bigint NOT NULL,
    lease_deadline_ms bigint NOT NULL,
    PRIMARY KEY (queue, idx, id)
);
CREATE INDEX superseded_lease ON {schema}.superseded (queue, idx, lease_deadline_ms, id);

-- done: what remains of a completed task for dedup and get (no payload).
CREATE TABLE {schema}.done (
    queue            text COLLATE "C" NOT NULL,
    idx              integer NOT NULL,
    id               text COLLATE "C" NOT NULL,
    due_ms           bigint NOT NULL,
    scheduled_due_ms bigint NOT NULL,
    attempt          integer NOT NULL,
    generation       bigint NOT NULL,
    completed_ms     bigint NOT NULL,
    PRIMARY KEY (queue, idx, id)
);
CREATE INDEX done_completed ON {schema}.done (queue, idx, completed_ms, id);

-- ticks: the tick ledger of recurring schedules (ids created and not yet forgotten).
CREATE TABLE {schema}.ticks (
    queue  text COLLATE "C" NOT NULL,
    idx    integer NOT NULL,
    id     text COLLATE "C" NOT NULL,
    due_ms bigint NOT NULL,
    PRIMARY KEY (queue, idx, id)
);

-- paused: paused queues and since when.
CREATE TABLE {schema}.paused (
    queue     text COLLATE "C" PRIMARY KEY,
    paused_ms bigint NOT NULL
);

-- rate_windows: fire tokens taken per queue and rate window.
CREATE TABLE {schema}.rate_windows (
    queue           text COLLATE "C" NOT NULL,
    window_start_ms bigint NOT NULL,
    taken           bigint NOT NULL,
    PRIMARY KEY (queue, window_start_ms)
);

-- global_slots: holders of a queue's cluster-wide handler slots.
CREATE TABLE {schema}.global_slots (
    queue             text COLLATE "C" NOT NULL,
    node              text COLLATE "C" NOT NULL,
    held              bigint NOT NULL,
    lease_deadline_ms bigint NOT NULL,
    PRIMARY KEY (queue, node)
);

-- recurring: schedules (the engine's opaque record), their shard, next tick while active,
-- and the latest fire learnt.
CREATE TABLE {schema}.recurring (
    name          text COLLATE "C" PRIMARY KEY,
    shard         integer NOT NULL,
    record        text NOT NULL,
    next_ms       bigint,
    last_tick_ms  bigint,
    last_fired_ms bigint
);
CREATE INDEX recurring_next ON {schema}.recurring (shard, next_ms, name) WHERE next_ms IS NOT NULL;
