-- prune_done.lua: forgets completed tasks (executed-set entries and their records).
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: done       ZSET id -> completed_ms
-- ARGV[1]: older_than_ms (entries completed strictly before it go)
-- ARGV[2]: limit
-- Returns: how many were pruned.

local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then
  call_in_chunks('HDEL', KEYS[1], ids)
  call_in_chunks('ZREM', KEYS[2], ids)
end
return #ids
