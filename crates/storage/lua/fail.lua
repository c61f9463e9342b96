-- fail.lua: a handler failed; retries the task later or dead-letters it.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- KEYS[5], KEYS[6]: flow, parked: the task's slot of its flow key comes back with a dead
--          letter, and with a retry unless the queue keeps FIFO order (flow.lua)
-- ARGV[1]: id
-- ARGV[2]: generation of the token
-- ARGV[3]: claim number of the token
-- ARGV[4]: the handler's error text (kept as the record's last error)
-- ARGV[5]: 'retry', 'requeue' (pending again with the same attempt: it never ran, the node
--          lacked a resource to start it) or 'dead'
-- ARGV[6]: for 'retry' and 'requeue': the due time of the next attempt, in ms
-- Returns: { 'retrying', next attempt, due } | { 'dead' } | { 'superseded' } (scheduled
-- again meanwhile: nothing recorded, only this claim's in-flight entry dropped; or cancelled
-- while running: no retry, the task is gone).
-- Errors: DELAYQ_STALE (nothing changed), DELAYQ_CORRUPT.

local due_key, tasks_key, inflight_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local id = ARGV[1]
local verdict, detail, raw = check_token(tasks_key, inflight_key, id, ARGV[2], ARGV[3])
local fc = { due = due_key, flow = KEYS[5], parked = KEYS[6] }
local flowing = redis.call('EXISTS', fc.flow) == 1
-- A refused token whose claim still owns the in-flight entry drops it (refuse_token): then
-- its flow key's slot comes back.
local drops_entry = (verdict == 'cancelled' or (verdict == 'superseded' and detail))
  and flowing and redis.call('ZSCORE', inflight_key, id)
local refusal = refuse_token(verdict, detail, id, tasks_key, inflight_key, { 'superseded' })
if refusal then
  if drops_entry then
    flow_release(fc, id)
  end
  return refusal
end

local rec, reason = decode_record(raw)
if not rec then
  return corrupt(id, reason)
end
local payload = string.sub(raw, rec.payload_at)
redis.call('ZREM', inflight_key, id)
if ARGV[5] == 'retry' or ARGV[5] == 'requeue' then
  local attempt = rec.attempt
  if ARGV[5] == 'retry' then
    attempt = attempt + 1
  end
  local due = ARGV[6]
  local sched = sched_of(rec)
  if sched == due then
    sched = ''
  end
  -- Pending again: the due is implicit (the score), the scheduled due stays the dedup key.
  redis.call('HSET', tasks_key, id, encode_record(rec.gen, attempt, rec.claim, '', sched, ARGV[4], payload))
  redis.call('ZADD', due_key, due, id)
  if flowing then
    flow_release_for_retry(fc, id, ARGV[2])
  end
  return { 'retrying', attempt, due }
end
if flowing then
  flow_release(fc, id)
end
redis.call('HSET', tasks_key, id, encode_record(rec.gen, rec.attempt, rec.claim, rec.due, rec.sched, ARGV[4], payload))
redis.call('ZADD', dead_key, redis_now_ms(), id)
return { 'dead' }
