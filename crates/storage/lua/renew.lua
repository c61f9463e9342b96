-- renew.lua: extends the lease of a running task.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: inflight   ZSET id -> lease deadline
-- ARGV[1]: id
-- ARGV[2]: generation of the token
-- ARGV[3]: claim number of the token
-- ARGV[4]: the new lease deadline in ms
-- Returns: 1. Errors: DELAYQ_STALE when the token does not hold the lease (requeued, claimed
-- again, or scheduled again); nothing changed. DELAYQ_CORRUPT. A task cancelled while its
-- handler runs keeps its lease until that handler reports: it is still running.

local tasks_key, inflight_key = KEYS[1], KEYS[2]
local id = ARGV[1]
local verdict, reason = check_token(tasks_key, inflight_key, id, ARGV[2], ARGV[3])
if verdict == 'corrupt' then
  return corrupt(id, reason)
elseif verdict ~= 'ok' and verdict ~= 'cancelled' then
  return stale()
end
redis.call('ZADD', inflight_key, 'XX', ARGV[4], id)
return 1
