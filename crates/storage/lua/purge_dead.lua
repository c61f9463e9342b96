-- purge_dead.lua: deletes dead letters and their records.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: dead       ZSET id -> failed_ms
-- KEYS[3]: traces     HASH id -> traceparent: a purged task's is dropped
-- ARGV[1]: 'one' or 'chunk'
-- ARGV[2]: for 'one': the id; for 'chunk': how many of the oldest to delete (the caller
--          repeats until fewer come back, so no single call blocks Redis for long)
-- Returns: how many dead letters were deleted.

if ARGV[1] == 'one' then
  if redis.call('ZREM', KEYS[2], ARGV[2]) == 1 then
    redis.call('HDEL', KEYS[1], ARGV[2])
    redis.call('HDEL', KEYS[3], ARGV[2])
    return 1
  end
  return 0
end
local ids = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[2]) - 1)
if #ids > 0 then
  call_in_chunks('HDEL', KEYS[1], ids)
  call_in_chunks('HDEL', KEYS[3], ids)
  call_in_chunks('ZREM', KEYS[2], ids)
end
return #ids
