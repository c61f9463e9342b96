-- requeue_expired.lua: puts in-flight tasks whose lease ran out back to pending, due now.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4], KEYS[5]: flow, parked (flow.lua): the holds of requeued tasks on flow keys end
-- ARGV[1]: now_ms of the caller; leases are judged at min(now_ms, Redis TIME), so a caller
--          whose clock jumped ahead never expires a healthy handler's lease (guarantee 9)
-- ARGV[2]: limit
-- Returns: the ids put back into `due` (at that now, same attempt: a crashed node is not the
-- task's fault; the record, its claim number included, is left as it is, so the old token
-- becomes stale). See requeue_leases() in sweep.lua for the ids it only forgets or drops.

local now = string.format('%d', math.min(tonumber(ARGV[1]), redis_now_ms()))
return requeue_leases(KEYS[1], KEYS[2], KEYS[3], now, tonumber(ARGV[2]),
  { due = KEYS[1], flow = KEYS[4], parked = KEYS[5] })
