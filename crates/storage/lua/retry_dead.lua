-- retry_dead.lua: makes a dead letter pending again with attempt 1.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: dead       ZSET id -> failed_ms
-- ARGV[1]: id
-- ARGV[2]: due_ms of the new attempt
-- Returns: 1 when the task was dead and is pending again, 0 when it was not dead. The
-- generation, the scheduled due (dedup key) and the last error are kept.
-- Errors: DELAYQ_CORRUPT (nothing changed).

local due_key, tasks_key, dead_key = KEYS[1], KEYS[2], KEYS[3]
local id, due = ARGV[1], ARGV[2]
if not redis.call('ZSCORE', dead_key, id) then
  return 0
end
local raw = redis.call('HGET', tasks_key, id)
if not raw then
  redis.call('ZREM', dead_key, id)
  return 0
end
local rec, reason = decode_record(raw)
if not rec then
  return corrupt(id, reason)
end
local sched = sched_of(rec)
if sched == due then
  sched = ''
end
redis.call('HSET', tasks_key, id,
  encode_record(rec.gen, 1, rec.claim, '', sched, rec.err, string.sub(raw, rec.payload_at)))
redis.call('ZREM', dead_key, id)
redis.call('ZADD', due_key, due, id)
return 1
