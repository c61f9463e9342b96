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

-- The ids among the registry's field/value `pairs` that have no score in the `deadlines`
-- ZSET: members of the previous release, which only refresh their `hb:<id>` key. One
-- ZMSCORE per 500 members (the Lua stack bounds unpack), run only when the registry is read.
local function without_deadline(deadlines, pairs)
  local ids = {}
  for i = 1, #pairs, 2 do
    ids[#ids + 1] = pairs[i]
  end
  local missing = {}
  for first = 1, #ids, 500 do
    local last = math.min(first + 499, #ids)
    local scores = redis.call('ZMSCORE', deadlines, unpack(ids, first, last))
    for i = 1, #scores do
      if not scores[i] then
        missing[#missing + 1] = ids[first + i - 1]
      end
    end
  end
  return missing
end

-- Every script answers with the same shape, so one parser reads them all:
-- {server seconds, server microseconds, epoch, added (0|1), removed ids, registry field/value
--  pairs (empty unless read), stalled (0|1): the heartbeat saw a stall, read (0|1): the
--  registry was read, ids of the registered members without a deadline (when read)}
-- The registry (O(members)) is read only when `read` is true: a caller that already holds
-- this epoch gets O(1) bytes.
local function reply(epoch, added, removed, stalled, read, deadlines)
  local now = redis.call('TIME')
  local registry, missing = {}, {}
  if read then
    registry = redis.call('HGETALL', KEYS[1])
    missing = without_deadline(deadlines, registry)
  end
  return {now[1], now[2], epoch, added, removed, registry, stalled or 0, read and 1 or 0, missing}
end
