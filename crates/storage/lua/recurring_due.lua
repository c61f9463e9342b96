-- recurring_due.lua: one look at a recurring shard by the node that drives it.
-- KEYS[1]: schedules  HASH name -> record
-- KEYS[2]: next       ZSET name -> next tick ms of the active schedules
-- KEYS[3]: fired      HASH name -> '<tick_ms>:<fired_ms>'
-- ARGV[1]: until ms: schedules whose next tick is at or before it are returned
-- ARGV[2]: the most schedules returned
-- Returns: { earliest next tick after those returned or '', schedule count,
--            name1, record1, fired1 or '', name2, ... } (earliest first). A name in `next`
--   without a record (outside tooling) is dropped from `next`.
local schedules_key, next_key, fired_key = KEYS[1], KEYS[2], KEYS[3]
local limit = tonumber(ARGV[2])
local due = redis.call('ZRANGEBYSCORE', next_key, '-inf', ARGV[1], 'LIMIT', 0, limit)
local out = { '', redis.call('HLEN', schedules_key) }
for _, name in ipairs(due) do
  local record = redis.call('HGET', schedules_key, name)
  if record then
    out[#out + 1] = name
    out[#out + 1] = record
    out[#out + 1] = redis.call('HGET', fired_key, name) or ''
  else
    redis.call('ZREM', next_key, name)
  end
end
local later = redis.call('ZRANGEBYSCORE', next_key, '(' .. ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if later[2] then
  out[1] = later[2]
end
return out
