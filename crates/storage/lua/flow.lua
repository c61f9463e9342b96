-- flow.lua: flow keys (per-key limits and order; the rules are in src/flow.rs), shared by the
-- scripts that claim, end, cancel, replace or find tasks. Needs util.lua in front of it.
-- A flow context `fc` is a table of the partition's keys:
--   fc.due     ZSET id -> due_ms: the pending index
--   fc.flow    HASH, absent while no task of the partition holds or waits for a key:
--              'k'..key -> the key's record (below), while the key has a hold, a parked task
--                          or a representative
--              'p'..id  -> the pending time of a parked task (15 digits: what `due` held)
--   fc.parked  ZSET, all scores 0, members key NUL time NUL id (time: 15 digits): the parked
--              tasks in key order, then time order, so a key's earliest is one ZRANGEBYLEX
--   fc.fires   ZSET, all scores 0, members key NUL time NUL id: the fires of each key within
--              its rate period
--   fc.fire_times ZSET key -> time of its latest fire: to forget the fires of idle keys
-- Keys and ids hold no NUL (TaskId), so a key's members are exactly ['key\0', 'key\1').
-- A key's record is one string, so that a claim or an ack of a keyed task costs one HGET and
-- one HSET (or HDEL) of it: '<parked> <rep length> <rep>' then one '<id length> <id> <gen><c|f>'
-- per task holding a slot of the key ('f': the hold lasts through retries, FIFO). `rep`: the
-- key's representative, the one task waiting in `due` for the key's rate ('' for none).
-- Lengths make any id safe in it. In Lua a record is { parked = n, rep = id or '', holders =
-- { { id =, gen = (digits), fifo = bool }, ... } }.

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

-- The record of `key` (an empty one when it has none).
local function key_read(fc, key)
  local rec = { parked = 0, rep = '', holders = {} }
  local raw = redis.call('HGET', fc.flow, 'k' .. key)
  if not raw then
    return rec
  end
  local parked, replen, pos = string.match(raw, '^(%d+) (%d+) ()')
  rec.parked = tonumber(parked)
  replen = tonumber(replen)
  rec.rep = string.sub(raw, pos, pos + replen - 1)
  pos = pos + replen
  while pos <= #raw do
    local idlen, at = string.match(raw, '^ ?(%d+) ()', pos)
    idlen = tonumber(idlen)
    local id = string.sub(raw, at, at + idlen - 1)
    local gen, mode, after = string.match(raw, '^ (%d+)([cf])()', at + idlen)
    rec.holders[#rec.holders + 1] = { id = id, gen = gen, fifo = mode == 'f' }
    pos = after
  end
  return rec
end

-- Writes `key`'s record back (deletes it when it holds nothing).
local function key_write(fc, key, rec)
  if rec.parked <= 0 and rec.rep == '' and #rec.holders == 0 then
    redis.call('HDEL', fc.flow, 'k' .. key)
    return
  end
  local parts = { string.format('%d', rec.parked), ' ', #rec.rep, ' ', rec.rep }
  for _, holder in ipairs(rec.holders) do
    parts[#parts + 1] = ' ' .. #holder.id .. ' ' .. holder.id .. ' ' .. holder.gen
      .. (holder.fifo and 'f' or 'c')
  end
  redis.call('HSET', fc.flow, 'k' .. key, table.concat(parts))
end

-- The index of `id`'s hold in `rec`, or nil.
local function holder_of(rec, id)
  for index, holder in ipairs(rec.holders) do
    if holder.id == id then
      return index
    end
  end
  return nil
end

-- Moves up to `n` of `key`'s earliest parked tasks back into `due` at their times, counting
-- them out of `rec`; `later`, when given, collects { time, id } pairs instead (a claim adds
-- them after its ZREMRANGEBYRANK).
local function flow_unpark(fc, key, rec, n, later)
  if rec.parked <= 0 or n <= 0 then
    return
  end
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
  rec.parked = rec.parked - #members
  if #members < n then
    -- The count ran ahead of the set (it cannot, but the set is what is true).
    rec.parked = 0
  end
end

-- Ends the hold of `id` taken by `generation` (nil: by whichever), if it has one, and lets
-- its key's next parked task go back to pending (unless the key waits for its rate: then its
-- representative leads). `only_not_fifo`: only a hold that does not last through retries.
local function release_hold(fc, id, generation, only_not_fifo, other_generation)
  local key = flow_key_of(id)
  if not key then
    return
  end
  local rec = key_read(fc, key)
  local index = holder_of(rec, id)
  if not index then
    return
  end
  local holder = rec.holders[index]
  if generation and other_generation then
    if holder.gen == gen_text(generation) then
      return
    end
  elseif generation and holder.gen ~= gen_text(generation) then
    return
  end
  if only_not_fifo and holder.fifo then
    return
  end
  table.remove(rec.holders, index)
  if rec.rep == '' then
    flow_unpark(fc, key, rec, 1)
  end
  key_write(fc, key, rec)
end

local function flow_release(fc, id, generation)
  release_hold(fc, id, generation, false, false)
end

-- An attempt failed and waits for its retry, or its lease ran out: the hold ends unless it
-- lasts through retries (FIFO).
local function flow_release_for_retry(fc, id, generation)
  release_hold(fc, id, generation, true, false)
end

-- A hold of `id` by another generation than `generation` ends (an old run of a rescheduled
-- id whose lease ran out).
local function flow_release_other(fc, id, generation)
  release_hold(fc, id, generation, false, true)
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
  local rec = key_read(fc, key)
  local changed = false
  if at then
    redis.call('ZREM', fc.parked, key .. '\0' .. at .. '\0' .. id)
    redis.call('HDEL', fc.flow, 'p' .. id)
    at = string.format('%d', tonumber(at))
    rec.parked = rec.parked - 1
    changed = true
  end
  if rec.rep == id then
    rec.rep = ''
    flow_unpark(fc, key, rec, 1)
    changed = true
  end
  if changed then
    key_write(fc, key, rec)
  end
  return at
end

-- Parks `id` (out of `due` already), pending at `at`, behind its key (counted in `rec`).
local function flow_park(fc, key, rec, id, at)
  local padded = time15(at)
  redis.call('ZADD', fc.parked, 0, key .. '\0' .. padded .. '\0' .. id)
  redis.call('HSET', fc.flow, 'p' .. id, padded)
  rec.parked = rec.parked + 1
  if rec.rep == id then
    rec.rep = ''
  end
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

-- What a claim does with the due task `id` (of `generation`) of flow key `key` (its record
-- `rec`, changed here; the caller writes it) at `now`, under limits `lim` = { slots = n or
-- nil, rate = n or nil, period = ms, fifo = bool }: 'run' (the hold and the fire are
-- recorded), 'park', or 'wait', time (the key's representative waits for its rate until
-- then).
local function flow_admit(fc, rec, id, key, generation, now, lim)
  local index = holder_of(rec, id)
  local holding = false
  if index then
    if rec.holders[index].gen ~= gen_text(generation) then
      -- An older generation of this id still runs: the new one waits for it.
      return 'park'
    end
    holding = true
  end
  if not holding and lim.slots and #rec.holders >= lim.slots then
    return 'park'
  end
  if lim.rate then
    local since = now - lim.period + 1
    redis.call('ZREMRANGEBYLEX', fc.fires, key_first(key), '(' .. key .. '\0' .. time15(since))
    local fired = redis.call('ZLEXCOUNT', fc.fires, key_first(key), key_end(key))
    if fired >= lim.rate then
      local oldest = redis.call('ZRANGEBYLEX', fc.fires, key_first(key), key_end(key), 'LIMIT', fired - lim.rate, 1)
      local _, at = string.match(oldest[1], '^(.-)%z(%d+)%z')
      if rec.rep ~= '' and rec.rep ~= id then
        return 'park'
      end
      rec.rep = id
      return 'wait', tonumber(at) + lim.period
    end
    redis.call('ZADD', fc.fires, 0, key .. '\0' .. time15(now) .. '\0' .. id)
    redis.call('ZADD', fc.fire_times, now, key)
  end
  if rec.rep == id then
    rec.rep = ''
  end
  if not holding then
    rec.holders[#rec.holders + 1] = { id = id, gen = gen_text(generation), fifo = lim.fifo }
  end
  return 'run'
end

-- After a claim of a task of `key`: when the key has free slots and parked tasks (its limit
-- was raised, or its rate allows another fire), as many of them go back to pending (into
-- `later`, see flow_unpark).
local function flow_unpark_spare(fc, key, rec, lim, later)
  if rec.parked <= 0 or rec.rep ~= '' then
    return
  end
  local spare = 1
  if lim.slots then
    spare = lim.slots - #rec.holders
  end
  flow_unpark(fc, key, rec, spare, later)
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
    local rec = key_read(fc, key)
    if #rec.holders == 0 then
      if rec.rep ~= '' and not redis.call('ZSCORE', fc.due, rec.rep) then
        rec.rep = ''
      end
      if rec.rep == '' then
        -- The parked set is what is true: recount it.
        rec.parked = redis.call('ZLEXCOUNT', fc.parked, key_first(key), key_end(key))
        flow_unpark(fc, key, rec, 1)
        key_write(fc, key, rec)
      end
    end
    from = key_end(key)
  end
end
