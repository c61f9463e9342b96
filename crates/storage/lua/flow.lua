-- flow.lua: flow keys (per-key limits and order; the rules are in src/flow.rs), shared by the
-- scripts that claim, end, cancel, replace or find tasks. Needs util.lua in front of it.
-- A flow context `fc` is a table of the partition's keys:
--   fc.due     ZSET id -> due_ms: the pending index
--   fc.flow    HASH, absent while no task of the partition holds or waits for a key:
--              '#'..id  -> '<generation>|<c or f>': the task holds a slot of its key (taken
--                          by that generation; 'f': the hold lasts through retries, FIFO)
--              'r'..key -> the key's holds
--              'w'..key -> the key's representative: the one task waiting in `due` for the
--                          key's rate
--              'p'..id  -> the pending time of a parked task (what `due` held for it)
--   fc.parked  ZSET, all scores 0, members key NUL time NUL id (time: 15 digits): the parked
--              tasks in key order, then time order, so a key's earliest is one ZRANGEBYLEX
--   fc.fires   ZSET, all scores 0, members key NUL time NUL id: the fires of each key within
--              its rate period
--   fc.fire_times ZSET key -> time of its latest fire: to forget the fires of idle keys
-- Keys and ids hold no NUL (TaskId), so a key's members are exactly ['key\0', 'key\1').

-- The flow key of a task id: between the first '{' and the next '}', when not empty.
local function flow_key_of(id)
  local open = string.find(id, '{', 1, true)
  if not open then
    return nil
  end
  local close = string.find(id, '}', open + 1, true)
  if not close or close == open + 1 then
    return nil
  end
  return string.sub(id, open + 1, close - 1)
end

-- A generation as the hold keeps it (decimal digits, whether given as a number or a string).
local function gen_text(generation)
  return string.format('%d', tonumber(generation))
end

local function time15(ms)
  return string.format('%015d', tonumber(ms))
end

local function key_first(key)
  return '[' .. key .. '\0'
end

local function key_end(key)
  return '(' .. key .. '\1'
end

-- Moves up to `n` of `key`'s earliest parked tasks back into `due` at their times; `later`,
-- when given, collects { time, id } pairs instead (a claim adds them after its ZREMRANGEBYRANK).
local function flow_unpark(fc, key, n, later)
  local members = redis.call('ZRANGEBYLEX', fc.parked, key_first(key), key_end(key), 'LIMIT', 0, n)
  for _, member in ipairs(members) do
    local _, at, id = string.match(member, '^(.-)%z(%d+)%z(.*)$')
    if later then
      later[#later + 1] = { at, id }
    else
      redis.call('ZADD', fc.due, at, id)
    end
    redis.call('HDEL', fc.flow, 'p' .. id)
  end
  if #members > 0 then
    redis.call('ZREM', fc.parked, unpack(members))
  end
end

-- Ends the hold of `id` taken by `generation` (nil: by whichever), if it has one, and lets
-- its key's next parked task go back to pending (unless the key waits for its rate: then its
-- representative leads).
local function flow_release(fc, id, generation)
  local hold = redis.call('HGET', fc.flow, '#' .. id)
  if not hold then
    return
  end
  if generation and string.match(hold, '^(%d+)') ~= gen_text(generation) then
    return
  end
  local key = flow_key_of(id)
  redis.call('HDEL', fc.flow, '#' .. id)
  if not key then
    return
  end
  if redis.call('HINCRBY', fc.flow, 'r' .. key, -1) <= 0 then
    redis.call('HDEL', fc.flow, 'r' .. key)
  end
  if redis.call('HEXISTS', fc.flow, 'w' .. key) == 0 then
    flow_unpark(fc, key, 1)
  end
end

-- An attempt failed and waits for its retry, or its lease ran out: the hold ends unless it
-- lasts through retries (FIFO).
local function flow_release_for_retry(fc, id, generation)
  local hold = redis.call('HGET', fc.flow, '#' .. id)
  if hold and string.sub(hold, -1) == 'c' then
    flow_release(fc, id, generation)
  end
end

-- A hold of `id` by another generation than `generation` ends (an old run of a rescheduled
-- id whose lease ran out).
local function flow_release_other(fc, id, generation)
  local hold = redis.call('HGET', fc.flow, '#' .. id)
  if hold and string.match(hold, '^(%d+)') ~= gen_text(generation) then
    flow_release(fc, id, nil)
  end
end

-- The pending time of `id` if it is parked, else nil.
local function flow_parked_at(fc, id)
  local at = redis.call('HGET', fc.flow, 'p' .. id)
  if at then
    return string.format('%d', tonumber(at))
  end
  return nil
end

-- Takes `id` out of the parked set if it is there (a cancel, a new schedule) and returns its
-- pending time; a key's representative that leaves `due` passes the turn on.
local function flow_remove(fc, id)
  local key = flow_key_of(id)
  if not key then
    return nil
  end
  local at = redis.call('HGET', fc.flow, 'p' .. id)
  if at then
    redis.call('ZREM', fc.parked, key .. '\0' .. at .. '\0' .. id)
    redis.call('HDEL', fc.flow, 'p' .. id)
    at = string.format('%d', tonumber(at))
  end
  if redis.call('HGET', fc.flow, 'w' .. key) == id then
    redis.call('HDEL', fc.flow, 'w' .. key)
    flow_unpark(fc, key, 1)
  end
  return at
end

-- Parks `id` (out of `due` already), pending at `at`, behind its key.
local function flow_park(fc, key, id, at)
  local padded = time15(at)
  redis.call('ZADD', fc.parked, 0, key .. '\0' .. padded .. '\0' .. id)
  redis.call('HSET', fc.flow, 'p' .. id, padded)
end

-- Forgets the fires older than `since` of up to `n` keys whose latest fire is that old.
local function flow_forget_idle_fires(fc, since, n)
  local idle = redis.call('ZRANGEBYSCORE', fc.fire_times, '-inf', '(' .. since, 'LIMIT', 0, n)
  for _, key in ipairs(idle) do
    redis.call('ZREMRANGEBYLEX', fc.fires, key_first(key), key_end(key))
  end
  if #idle > 0 then
    redis.call('ZREM', fc.fire_times, unpack(idle))
  end
end

-- What a claim does with the due task `id` (of `generation`, pending at `at`, out of `due`
-- already) of flow key `key` at `now`, under limits `lim` = { slots = n or nil, rate = n or
-- nil, period = ms, fifo = bool }: 'run' (the hold and the fire are recorded), 'park', or
-- 'wait', time (the key's representative waits for its rate until then).
local function flow_admit(fc, id, key, generation, now, lim)
  local hold = redis.call('HGET', fc.flow, '#' .. id)
  local holding = false
  if hold then
    if string.match(hold, '^(%d+)') ~= gen_text(generation) then
      -- An older generation of this id still runs: the new one waits for it.
      return 'park'
    end
    holding = true
  end
  if not holding and lim.slots then
    local running = tonumber(redis.call('HGET', fc.flow, 'r' .. key) or '0')
    if running >= lim.slots then
      return 'park'
    end
  end
  if lim.rate then
    local since = now - lim.period + 1
    redis.call('ZREMRANGEBYLEX', fc.fires, key_first(key), '(' .. key .. '\0' .. time15(since))
    local fired = redis.call('ZLEXCOUNT', fc.fires, key_first(key), key_end(key))
    if fired >= lim.rate then
      local oldest = redis.call('ZRANGEBYLEX', fc.fires, key_first(key), key_end(key), 'LIMIT', fired - lim.rate, 1)
      local _, at = string.match(oldest[1], '^(.-)%z(%d+)%z')
      local free_at = tonumber(at) + lim.period
      local representative = redis.call('HGET', fc.flow, 'w' .. key)
      if representative and representative ~= id then
        return 'park'
      end
      redis.call('HSET', fc.flow, 'w' .. key, id)
      return 'wait', free_at
    end
    redis.call('ZADD', fc.fires, 0, key .. '\0' .. time15(now) .. '\0' .. id)
    redis.call('ZADD', fc.fire_times, now, key)
  end
  if redis.call('HGET', fc.flow, 'w' .. key) == id then
    redis.call('HDEL', fc.flow, 'w' .. key)
  end
  if not holding then
    redis.call('HINCRBY', fc.flow, 'r' .. key, 1)
    redis.call('HSET', fc.flow, '#' .. id, gen_text(generation) .. '|' .. (lim.fifo and 'f' or 'c'))
  end
  return 'run'
end

-- After a claim of a task of `key`: when the key has free slots and parked tasks (its limit
-- was raised), as many of them go back to pending (into `later`, see flow_unpark).
local function flow_unpark_spare(fc, key, lim, later)
  if redis.call('HEXISTS', fc.flow, 'w' .. key) == 1 then
    return
  end
  local spare = 1
  if lim.slots then
    spare = lim.slots - tonumber(redis.call('HGET', fc.flow, 'r' .. key) or '0')
  end
  if spare > 0 then
    flow_unpark(fc, key, spare, later)
  end
end

-- The look's repair: a key with parked tasks, no hold and no representative waits for a
-- release that never comes (a limit lowered, a hold ended without one): its next task goes
-- back to pending. Looks at the first `n` parked keys.
local function flow_repair(fc, n)
  local from = '-'
  for _ = 1, n do
    local first = redis.call('ZRANGEBYLEX', fc.parked, from, '+', 'LIMIT', 0, 1)
    if #first == 0 then
      return
    end
    local key = string.match(first[1], '^(.-)%z')
    if redis.call('HEXISTS', fc.flow, 'r' .. key) == 0 then
      local representative = redis.call('HGET', fc.flow, 'w' .. key)
      if representative and not redis.call('ZSCORE', fc.due, representative) then
        redis.call('HDEL', fc.flow, 'w' .. key)
        representative = nil
      end
      if not representative then
        flow_unpark(fc, key, 1)
      end
    end
    from = key_end(key)
  end
end
