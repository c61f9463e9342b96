-- rate_take.lua: takes fire tokens of a queue's cluster-wide rate window.
-- KEYS[1]: the window's counter (STRING), named after the window's start
-- ARGV[1]: limit (tokens per window), ARGV[2]: wanted, ARGV[3]: counter TTL in ms
-- Returns: how many tokens were granted (0: the window is used up). The sum of the grants of
--   one window never exceeds the limit, whichever nodes asked.
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local grant = math.min(tonumber(ARGV[2]), tonumber(ARGV[1]) - used)
if grant <= 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], grant)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return grant
