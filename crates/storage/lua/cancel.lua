-- cancel.lua: cancels a task (guarantee 7: "cancelled" only when a fire was prevented).
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- KEYS[5]: traces     HASH id -> traceparent: a cancelled task's is dropped
-- KEYS[6], KEYS[7]: flow, parked (flow.lua): a parked task is pending too; a cancelled
--          task waiting with a slot of its flow key gives it back, and a representative
--          passes its turn on
-- ARGV[1]: id
-- Returns: 1 cancelled: a pending task (also one waiting for a retry, or scheduled again
--            while an older claim ran) or a dead letter was removed, with any in-flight entry;
--          2 in flight: its handler runs and cannot be un-run. The record's generation becomes
--            0 (record.lua): the running attempt is the last, and the task is gone once it
--            ends. Nothing else changes, so its lease and token stay valid;
--          0 the id names no live task.
-- A done entry is kept for dedup. A corrupt record can always be cancelled when pending or
-- dead; in flight, one that cannot be marked is removed (it could only be requeued).

local due_key, tasks_key, inflight_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local traces_key = KEYS[5]
local id = ARGV[1]
local fc = { due = due_key, flow = KEYS[6], parked = KEYS[7] }
local flowing = redis.call('EXISTS', fc.flow) == 1
local removed = redis.call('ZREM', due_key, id) + redis.call('ZREM', dead_key, id)
if flowing and (flow_remove(fc, id) or removed > 0) then
  removed = removed + 1
  -- A FIFO task waiting for its retry gives its key's slot back (an older run of the id
  -- in flight keeps its own until it ends).
  flow_release_waiting(fc, id)
end
if removed > 0 then
  -- An older run of the id still in flight (it was scheduled again) is forgotten with it:
  -- its slot comes back now (its ack will not find its entry).
  if redis.call('ZREM', inflight_key, id) == 1 and flowing then
    flow_release(fc, id)
  end
  redis.call('HDEL', tasks_key, id)
  redis.call('HDEL', traces_key, id)
  return 1
end
if not redis.call('ZSCORE', inflight_key, id) then
  return 0
end
local raw = redis.call('HGET', tasks_key, id)
if not raw then
  redis.call('ZREM', inflight_key, id)
  return 0
end
local version, rest = string.match(raw, '^(%d+)|%d+(|.*)$')
redis.call('HDEL', traces_key, id)
if version ~= '1' then
  redis.call('ZREM', inflight_key, id)
  redis.call('HDEL', tasks_key, id)
  return 1
end
redis.call('HSET', tasks_key, id, version .. '|0' .. rest)
return 2
