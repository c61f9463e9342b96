-- list_dead.lua: the oldest dead letters of a partition with their records.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: dead       ZSET id -> failed_ms
-- ARGV[1]: limit (>= 1)
-- Returns: { id1, failed_ms1, record1, id2, ... }, oldest first; a dead entry without a
-- record is skipped.

local entries = redis.call('ZRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #entries, 2 do
  local raw = redis.call('HGET', KEYS[1], entries[i])
  if raw then
    out[#out + 1] = entries[i]
    out[#out + 1] = entries[i + 1]
    out[#out + 1] = raw
  end
end
return out
