-- Prelude of every membership script (prepended to each one): KEYS[2] is always the epoch.

-- The epoch after one membership change. `floor` (a decimal string) is the highest epoch the
-- caller has seen: if Redis lost its data the counter restarts there, never below it.
local function bump_epoch(floor)
  local current = tonumber(redis.call('GET', KEYS[2]) or '0')
  if current < tonumber(floor) then
    redis.call('SET', KEYS[2], floor)
  end
  return redis.call('INCR', KEYS[2])
end

local function read_epoch()
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end

-- Every script answers with the same shape, so one parser reads them all:
-- {server seconds, server microseconds, epoch, added (0|1), removed ids, registry field/value
--  pairs, stalled (0|1): the heartbeat found this node's own heartbeat expired while registered}
local function reply(epoch, added, removed, stalled)
  local now = redis.call('TIME')
  return {now[1], now[2], epoch, added, removed, redis.call('HGETALL', KEYS[1]), stalled or 0}
end
