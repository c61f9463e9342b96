-- recurring_swap.lua: compare-and-set of one recurring schedule's record and next tick.
-- KEYS[1]: schedules  HASH name -> record (the engine's JSON of spec and state)
-- KEYS[2]: next       ZSET name -> next tick ms, for the active schedules only
-- KEYS[3]: fired      HASH name -> '<tick_ms>:<fired_ms>' of the latest fired tick
-- ARGV[1]: name
-- ARGV[2]: '1' if a record is expected, '0' if the schedule must not exist
-- ARGV[3]: the expected record (when ARGV[2] is '1')
-- ARGV[4]: '1' to store ARGV[5] as the new record, '0' to delete the schedule
-- ARGV[5]: the new record
-- ARGV[6]: the next tick ms, or '' to take the schedule out of the due set
-- Returns: 1 when swapped, 0 when the record was not the expected one (nothing changed).
local schedules_key, next_key, fired_key = KEYS[1], KEYS[2], KEYS[3]
local name = ARGV[1]
local current = redis.call('HGET', schedules_key, name)
if ARGV[2] == '1' then
  if current ~= ARGV[3] then
    return 0
  end
elseif current then
  return 0
end
if ARGV[4] == '1' then
  redis.call('HSET', schedules_key, name, ARGV[5])
  if ARGV[6] ~= '' then
    redis.call('ZADD', next_key, ARGV[6], name)
  else
    redis.call('ZREM', next_key, name)
  end
else
  redis.call('HDEL', schedules_key, name)
  redis.call('ZREM', next_key, name)
  redis.call('HDEL', fired_key, name)
end
return 1
