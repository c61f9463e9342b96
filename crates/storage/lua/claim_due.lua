-- claim_due.lua: moves up to `limit` due tasks of one partition from pending to in flight.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- ARGV[1]: now_ms (tasks with due <= now are taken, oldest due first)
-- ARGV[2]: limit
-- ARGV[3]: lease deadline in ms
-- Returns: { next pending due (string) or nil, id1, record1, id2, record2, ... }; each record
-- already carries its new claim number (the fencing token's), which is
-- max(previous claim + 1, Redis TIME in microseconds): growing per record, and never equal to
-- a claim of an earlier life of the same id (cancelled, then scheduled afresh at claim 0).
-- Every candidate is decoded before anything is written: a corrupt record fails the whole
-- call with DELAYQ_CORRUPT and nothing changes. A due entry without a record is dropped.
-- Speed: one HMGET, one HSET, one ZREMRANGEBYRANK and one ZADD for the whole batch (a redis.call costs
-- more than the Lua around it).

local due_key, tasks_key, inflight_key = KEYS[1], KEYS[2], KEYS[3]
local lease = ARGV[3]
-- id1, score1, id2, score2, ...
local entries = redis.call('ZRANGEBYSCORE', due_key, '-inf', ARGV[1], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local ids = {}
for i = 1, #entries, 2 do
  ids[#ids + 1] = entries[i]
end

local out = { false }
if #ids > 0 then
  local raws = read_in_chunks('HMGET', tasks_key, ids)
  local decoded = {}
  for i, id in ipairs(ids) do
    local raw = raws[i]
    if raw then
      local rec, reason = decode_record(raw)
      if not rec then
        return corrupt(id, reason)
      end
      decoded[i] = rec
    end
  end

  local now_us = redis_now_us()
  local records, leases = {}, {}
  for i, id in ipairs(ids) do
    local rec = decoded[i]
    if rec then
      local claim = math.max(rec.claim + 1, now_us)
      -- The due becomes explicit: the record must keep it once the task leaves `due`.
      local due = due_of(rec, entries[2 * i])
      local record = encode_record(rec.gen, rec.attempt, claim, due, rec.sched, rec.err,
        string.sub(raws[i], rec.payload_at))
      records[#records + 1] = id
      records[#records + 1] = record
      leases[#leases + 1] = lease
      leases[#leases + 1] = id
      out[#out + 1] = id
      out[#out + 1] = record
    end
  end
  -- ZRANGEBYSCORE from -inf returned the first #ids members by rank: drop them by rank.
  redis.call('ZREMRANGEBYRANK', due_key, 0, #ids - 1)
  if #records > 0 then
    call_in_chunks('HSET', tasks_key, records)
    call_in_chunks('ZADD', inflight_key, leases)
  end
end

local next_due = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
if next_due[2] then
  out[1] = next_due[2]
end
return out
