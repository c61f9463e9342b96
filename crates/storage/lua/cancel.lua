-- cancel.lua: removes a pending, in-flight or dead task (a done entry is kept for dedup).
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- ARGV[1]: id
-- Returns: 1 when a task was removed, 0 when the id named no live task. The record is not
-- decoded, so a corrupt record can always be cancelled.

local id = ARGV[1]
local removed = redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[3], id) + redis.call('ZREM', KEYS[4], id)
if removed > 0 then
  redis.call('HDEL', KEYS[2], id)
  return 1
end
return 0
