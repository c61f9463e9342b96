-- requeue_expired.lua: puts in-flight tasks whose lease ran out back to pending, due now.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- ARGV[1]: now_ms of the caller; leases are judged at min(now_ms, Redis TIME), so a caller
--          whose clock jumped ahead never expires a healthy handler's lease (guarantee 9)
-- ARGV[2]: limit
-- Returns: the ids put back into `due` (at that now, same attempt: a crashed node is not the
-- task's fault; the record, its claim number included, is left as it is, so the old token
-- becomes stale). An id that is already pending again (scheduled while it ran) or has no
-- record only loses its in-flight entry and is not returned; a task cancelled while it ran
-- (generation 0) is dropped, record and all: its last attempt is over.

local due_key, tasks_key, inflight_key = KEYS[1], KEYS[2], KEYS[3]
local now = string.format('%d', math.min(tonumber(ARGV[1]), redis_now_ms()))
local ids = redis.call('ZRANGEBYSCORE', inflight_key, '-inf', '(' .. now, 'LIMIT', 0, tonumber(ARGV[2]))
local requeued = {}
for _, id in ipairs(ids) do
  if not redis.call('ZSCORE', due_key, id) then
    local raw = redis.call('HGET', tasks_key, id)
    if raw and is_cancelled_raw(raw) then
      redis.call('HDEL', tasks_key, id)
    elseif raw then
      redis.call('ZADD', due_key, now, id)
      requeued[#requeued + 1] = id
    end
  end
end
if #ids > 0 then
  call_in_chunks('ZREM', inflight_key, ids)
end
return requeued
