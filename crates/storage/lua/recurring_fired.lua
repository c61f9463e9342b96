-- recurring_fired.lua: remembers the latest tick of a schedule handed to a handler.
-- KEYS[1]: schedules  HASH name -> record
-- KEYS[2]: fired      HASH name -> '<tick_ms>:<fired_ms>'
-- ARGV[1]: name, ARGV[2]: tick ms, ARGV[3]: fired ms (cluster clock)
-- Returns 1 when recorded; 0 when the schedule does not exist (an ordinary task whose id
-- merely looks like a tick) or a later tick is already recorded.
local schedules_key, fired_key = KEYS[1], KEYS[2]
local name = ARGV[1]
if not redis.call('HGET', schedules_key, name) then
  return 0
end
local previous = redis.call('HGET', fired_key, name)
if previous then
  local tick = tonumber(string.match(previous, '^(%d+):'))
  if tick and tick > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('HSET', fired_key, name, ARGV[2] .. ':' .. ARGV[3])
return 1
