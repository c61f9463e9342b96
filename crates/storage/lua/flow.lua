-- flow.lua: flow keys (per-key limits and order; the rules are in src/flow.rs), shared by the
-- scripts that claim, end, cancel, replace or find tasks. Needs util.lua in front of it.
-- A flow context `fc` is a table of the partition's keys:
--   fc.due     ZSET id -> due_ms: the pending index
--   fc.flow    HASH, absent while no task of the partition holds or waits for a key:
--              'r'..key -> the key's slots held: its tasks in flight, and with FIFO order
--                          those waiting for a retry or requeued after a lost lease
--              'n'..key -> the key's parked tasks (absent at 0)
--              'w'..key -> the key's representative: the one task waiting in `due` for the
--                          key's rate
--              'h'..id  -> the generation of a task that holds a slot while it is not in
--                          flight (FIFO order: waiting for its retry, or requeued)
--              'p'..id  -> the pending time of a parked task (15 digits: what `due` held)
--              'f'      -> '1' while the queue's claims keep FIFO order (set by each claim),
--                          for the scripts that end attempts
--   fc.parked  ZSET, all scores 0, members key NUL time NUL id (time: 15 digits): the parked
--              tasks in key order, then time order, so a key's earliest is one ZRANGEBYLEX
--   fc.fires   ZSET, all scores 0, members key NUL time NUL tag: the fires of each key within
--              its rate period (tag: the claim's Redis TIME in µs and its count of fires, so
--              two fires are never one member)
--   fc.fire_times ZSET key -> time of its latest fire: to forget the fires of idle keys
-- Keys and ids hold no NUL (TaskId), so a key's members are exactly ['key\0', 'key\1').
-- A slot is counted once per claim and given back once per end of that claim: the scripts
-- that take a task out of `inflight` (ack, fail, the lease sweep) give it back, each only
-- when its own ZREM removed the entry, so no slot is given back twice. A claim of an id still
-- in flight under an older claim (scheduled again while it runs) parks it until that run
-- ends, so one entry of `inflight` never stands for two runs. On the common path a keyed
-- claim costs one HINCRBY and an ack one HINCRBY, one HDEL and one HGET.

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

local function time15(ms)
  return string.format('%015d', tonumber(ms))
end

local function key_first(key)
  return '[' .. key .. '\0'
end

local function key_end(key)
  return '(' .. key .. '\1'
end

-- Counts `change` parked tasks more (or fewer) for `key`.
local function count_parked(fc, key, change)
  if change == 0 then
    return
  end
  if redis.call('HINCRBY', fc.flow, 'n' .. key, change) <= 0 then
    redis.call('HDEL', fc.flow, 'n' .. key)
  end
end

-- Moves up to `n` of `key`'s earliest parked tasks back into `due` at their times; `later`,
-- when given, collects { time, id } pairs instead (a claim adds them after its
-- ZREMRANGEBYRANK).
local function flow_unpark(fc, key, n, later)
  if n <= 0 then
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
    count_parked(fc, key, -#members)
  end
end

-- Lets `key`'s next parked task go back to pending, if it has one and does not wait for
-- its rate (then its representative leads). `fc.none_parked`: the caller knows the partition
-- parks nothing (asked once per call).
local function unpark_next(fc, key)
  if not fc.none_parked and redis.call('HEXISTS', fc.flow, 'n' .. key) == 1
      and redis.call('HEXISTS', fc.flow, 'w' .. key) == 0 then
    flow_unpark(fc, key, 1)
  end
end

-- One slot of `key` fewer held (its field goes at 0).
local function give_slot_back(fc, key)
  if redis.call('HINCRBY', fc.flow, 'r' .. key, -1) <= 0 then
    redis.call('HDEL', fc.flow, 'r' .. key)
  end
end

-- Gives back the slot of `id`'s key (one end of one claim, or of a FIFO hold), and lets the
-- key's next parked task go back to pending.
local function flow_release(fc, id)
  local key = flow_key_of(id)
  if not key then
    return
  end
  give_slot_back(fc, key)
  unpark_next(fc, key)
end

-- An attempt of `id` (of generation `generation`) ended, waiting for its retry or requeued:
-- with FIFO order its slot stays held (marked, so that its next claim takes no other),
-- otherwise it is given back.
local function flow_release_for_retry(fc, id, generation)
  if not flow_key_of(id) then
    return
  end
  if redis.call('HGET', fc.flow, 'f') == '1' then
    redis.call('HSET', fc.flow, 'h' .. id, generation)
  else
    flow_release(fc, id)
  end
end

-- A pending task leaves (cancelled, or replaced by a new schedule): a FIFO slot it holds
-- while waiting is given back.
local function flow_release_waiting(fc, id)
  if redis.call('HDEL', fc.flow, 'h' .. id) == 1 then
    flow_release(fc, id)
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
    count_parked(fc, key, -1)
    at = string.format('%d', tonumber(at))
  end
  if redis.call('HGET', fc.flow, 'w' .. key) == id then
    redis.call('HDEL', fc.flow, 'w' .. key)
    flow_unpark(fc, key, 1)
  end
  return at
end

-- Parks `id` (out of `due` already), pending at `at`, behind its key; the caller counts it
-- (count_parked), once per key for a whole claim.
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

-- What a claim does with the due task `id` (of generation `generation`, claimed before when
-- `claimed_before`) of flow key `key` at `now`, under limits `lim` = { slots = n or nil, rate
-- = n or nil, period = ms, fifo = bool }: 'run' (its slot and its fire are counted), 'park',
-- or 'wait', time (the key's representative waits for its rate until then). With 'run', the
-- second value is the key's slots held after it; with 'park', true when the whole key is
-- blocked for the rest of the claim (no slot, or its rate used up), not only this id.
local function flow_admit(fc, inflight_key, id, key, generation, claimed_before, now, lim, fire_tag)
  if claimed_before and redis.call('ZSCORE', inflight_key, id) then
    -- An older claim of this id still runs (it was scheduled again): this one waits.
    return 'park'
  end
  local holding = lim.fifo and redis.call('HGET', fc.flow, 'h' .. id) == generation
  local held = nil
  if not holding then
    held = redis.call('HINCRBY', fc.flow, 'r' .. key, 1)
    if lim.slots and held > lim.slots then
      redis.call('HINCRBY', fc.flow, 'r' .. key, -1)
      return 'park', true
    end
  end
  if lim.rate then
    local since = now - lim.period + 1
    redis.call('ZREMRANGEBYLEX', fc.fires, key_first(key), '(' .. key .. '\0' .. time15(since))
    local fired = redis.call('ZLEXCOUNT', fc.fires, key_first(key), key_end(key))
    if fired >= lim.rate then
      if not holding then
        give_slot_back(fc, key)
      end
      local representative = redis.call('HGET', fc.flow, 'w' .. key)
      if representative and representative ~= id then
        return 'park', true
      end
      local oldest = redis.call('ZRANGEBYLEX', fc.fires, key_first(key), key_end(key), 'LIMIT', fired - lim.rate, 1)
      local _, at = string.match(oldest[1], '^(.-)%z(%d+)%z')
      redis.call('HSET', fc.flow, 'w' .. key, id)
      return 'wait', tonumber(at) + lim.period
    end
    redis.call('ZADD', fc.fires, 0, key .. '\0' .. time15(now) .. '\0' .. fire_tag)
    redis.call('ZADD', fc.fire_times, now, key)
    if redis.call('HGET', fc.flow, 'w' .. key) == id then
      redis.call('HDEL', fc.flow, 'w' .. key)
    end
  end
  if holding then
    -- Its slot, held while it waited, is now that of a task in flight.
    redis.call('HDEL', fc.flow, 'h' .. id)
  end
  return 'run', held
end

-- After a claim of a task of `key` that left it `held` slots (nil: unknown): when the key
-- has free slots and parked tasks (its limit was raised, or its rate allows another fire),
-- as many of them go back to pending (into `later`, see flow_unpark). One slot per key and
-- no rate (the common FIFO and concurrency-1 case) costs nothing here.
local function flow_unpark_spare(fc, key, held, lim, later)
  local spare = 1
  if lim.slots then
    if lim.slots == 1 and not lim.rate then
      return
    end
    held = held or tonumber(redis.call('HGET', fc.flow, 'r' .. key) or '0')
    spare = lim.slots - held
  end
  if spare <= 0 or redis.call('HEXISTS', fc.flow, 'n' .. key) == 0
      or redis.call('HEXISTS', fc.flow, 'w' .. key) == 1 then
    return
  end
  flow_unpark(fc, key, spare, later)
end

-- The look's repair: a key with parked tasks, no slot held and no representative waits for
-- a release that never comes (a limit lowered, a slot ended without one): its next task
-- goes back to pending. Looks at the first `n` parked keys.
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
        -- The parked set is what is true: recount it.
        local count = redis.call('ZLEXCOUNT', fc.parked, key_first(key), key_end(key))
        redis.call('HSET', fc.flow, 'n' .. key, count)
        flow_unpark(fc, key, 1)
      end
    end
    from = key_end(key)
  end
end
