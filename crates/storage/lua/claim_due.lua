-- claim_due.lua: moves up to `limit` due tasks of one partition from pending to in flight.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- KEYS[5]: receipt    STRING: the latest claim of the partition (see recover_claim.lua)
-- KEYS[6]: paused     STRING: exists while the queue is paused (guarantee 11); then nothing
--          is claimed and the reply is { false, -1 }
-- ARGV[1]: now_ms of the caller: tasks with due <= min(now_ms, Redis TIME) are taken, oldest
--          due first, so a caller whose clock runs ahead never fires early (guarantee 9)
-- ARGV[2]: limit
-- ARGV[3]: lease deadline in ms
-- ARGV[4]: owner (the claiming node), kept in the receipt
-- ARGV[5]: most payload bytes to return (headers and last errors do not count); at least one
--          due task is always taken
-- Returns: { next pending due (string) or false, count of claimed tasks, id1, record1, ...,
--   then for each record moved to the dead letters: id, reason }. Each claimed record already
-- carries its new claim number (the fencing token's), which is max(previous claim + 1, Redis
-- TIME in microseconds): growing per record, and never equal to a claim of an earlier life of
-- the same id (cancelled, then scheduled afresh at claim 0).
-- A due record that cannot be decoded is a poison pill: it moves to `dead` (guarantee 8) as a
-- version 1 record whose payload is the record as it was and whose last error says why; the
-- claim goes on with the others. A due entry without a record, or with a record cancelled
-- while it ran (generation 0), is dropped.
-- Speed: records are read in chunks (16, 32, 64, ... 1024) so that the byte budget stops the read
-- early; one ZREMRANGEBYRANK, one HSET and one ZADD for the whole batch.

local due_key, tasks_key, inflight_key, dead_key, receipt_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if KEYS[6] and redis.call('EXISTS', KEYS[6]) == 1 then
  return { false, -1 }
end
local lease, owner = ARGV[3], ARGV[4]
local max_bytes = tonumber(ARGV[5])
local now_us = redis_now_us()
local now_ms = math.min(tonumber(ARGV[1]), math.floor(now_us / 1000))
-- id1, score1, id2, score2, ...
local entries = redis.call('ZRANGEBYSCORE', due_key, '-inf', string.format('%d', now_ms), 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local n = #entries / 2

local claimed, poisoned = {}, {}
local records, leases, dead, forget, receipt = {}, {}, {}, {}, {}
local taken, bytes, full = 0, 0, false
local first, chunk = 1, 16
while first <= n and not full do
  local last = math.min(first + chunk - 1, n)
  local ids = {}
  for i = first, last do
    ids[#ids + 1] = entries[2 * i - 1]
  end
  local raws = redis.call('HMGET', tasks_key, unpack(ids))
  for j, id in ipairs(ids) do
    local raw = raws[j]
    local gen, attempt, claim, due, sched_at, errlen, err_at
    -- The budget counts payload bytes, as the memory backend does: not the header, not the
    -- last error (neither is handed to the handler). An undecodable record counts whole.
    local size = 0
    if raw then
      gen, attempt, claim, due, sched_at, errlen, err_at = string.match(raw, CLAIM_FIELDS)
      size = #raw
      if gen then
        size = math.max(#raw - (err_at + (tonumber(errlen) or 0)) + 1, 0)
      end
    end
    if raw and #claimed > 0 and bytes + size > max_bytes then
      full = true
      break
    end
    taken = taken + 1
    if raw then
      local score = entries[2 * (first + j - 1)]
      local reason
      if not gen then
        local _
        _, reason = decode_record(raw)
        reason = reason or 'malformed version 1 header'
      elseif errlen ~= '' and err_at + tonumber(errlen) - 1 > #raw then
        reason = 'the error text runs past the end of the record'
      end
      if reason then
        reason = 'undecodable record moved to the dead letters (its payload is the record as it was): ' .. reason
        records[#records + 1] = id
        records[#records + 1] = encode_record(now_us, 1, 0, score, '', reason, raw)
        dead[#dead + 1] = now_ms
        dead[#dead + 1] = id
        poisoned[#poisoned + 1] = id
        poisoned[#poisoned + 1] = reason
      elseif gen == '0' then
        forget[#forget + 1] = id
      else
        claim = string.format('%d', math.max((tonumber(claim) or 0) + 1, now_us))
        -- Spliced, not re-encoded: a new claim number, and the due made explicit (the record
        -- must keep it once the task leaves `due`); the rest is copied as it is.
        local record = '1|' .. gen .. '|' .. attempt .. '|' .. claim .. '|'
          .. (due ~= '' and due or score) .. '|' .. string.sub(raw, sched_at)
        bytes = bytes + size
        records[#records + 1] = id
        records[#records + 1] = record
        leases[#leases + 1] = lease
        leases[#leases + 1] = id
        claimed[#claimed + 1] = id
        claimed[#claimed + 1] = record
        receipt[#receipt + 1] = id
        receipt[#receipt + 1] = claim
      end
    end
  end
  first = last + 1
  chunk = math.min(chunk * 2, 1024)
end

if taken > 0 then
  -- ZRANGEBYSCORE from -inf returned the first members by rank: drop those taken by rank.
  redis.call('ZREMRANGEBYRANK', due_key, 0, taken - 1)
end
if #records > 0 then
  call_in_chunks('HSET', tasks_key, records)
end
if #leases > 0 then
  call_in_chunks('ZADD', inflight_key, leases)
  -- The receipt lives as long as the lease: after that, lease expiry brings the tasks back.
  local ttl = math.max(tonumber(lease) - now_ms, 1000)
  redis.call('SET', receipt_key, cjson.encode({ owner, lease, receipt }), 'PX', string.format('%d', ttl))
end
if #dead > 0 then
  call_in_chunks('ZADD', dead_key, dead)
end
if #forget > 0 then
  call_in_chunks('HDEL', tasks_key, forget)
end

local out = { false, #claimed / 2 }
local next_due = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
if next_due[2] then
  out[1] = next_due[2]
end
for i = 1, #claimed do
  out[#out + 1] = claimed[i]
end
for i = 1, #poisoned do
  out[#out + 1] = poisoned[i]
end
return out
