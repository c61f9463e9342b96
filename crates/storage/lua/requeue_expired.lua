-- requeue_expired.lua: puts in-flight tasks whose lease ran out back to pending, due now.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- ARGV[1]: now_ms (leases < now have run out)
-- ARGV[2]: limit
-- Returns: the ids put back into `due` (at now_ms, same attempt: a crashed node is not the
-- task's fault; the record, its claim number included, is left as it is, so the old token
-- becomes stale). An id that is already pending again (scheduled while it ran) or has no
-- record only loses its in-flight entry and is not returned.

local due_key, tasks_key, inflight_key = KEYS[1], KEYS[2], KEYS[3]
local now = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', inflight_key, '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[2]))
local requeued = {}
for _, id in ipairs(ids) do
  if not redis.call('ZSCORE', due_key, id) and redis.call('HEXISTS', tasks_key, id) == 1 then
    redis.call('ZADD', due_key, now, id)
    requeued[#requeued + 1] = id
  end
end
if #ids > 0 then
  call_in_chunks('ZREM', inflight_key, ids)
end
return requeued
