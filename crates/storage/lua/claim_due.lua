-- claim_due.lua: moves up to `limit` due tasks of each of one or more partitions from pending
-- to in flight.
-- For each partition k = 0, 1, ... (11 keys and 9 arguments each):
-- KEYS[11k+1]: due        ZSET id -> due_ms
-- KEYS[11k+2]: tasks      HASH id -> record
-- KEYS[11k+3]: inflight   ZSET id -> lease deadline
-- KEYS[11k+4]: dead       ZSET id -> failed_ms
-- KEYS[11k+5]: receipt    STRING: the latest claim of the partition (see recover_claim.lua)
-- KEYS[11k+6]: paused     STRING: exists while the queue is paused (guarantee 11); then nothing
--             is claimed and the partition's reply is { false, -1 }
-- KEYS[11k+7]: traces     HASH id -> traceparent (see schedule.lua)
-- KEYS[11k+8..11k+11]: flow, parked, fires, fire_times: the flow-key state (flow.lua), used
--             only when the partition's per-key limits are given
-- ARGV[9k+1]: now_ms of the caller: tasks with due <= min(now_ms, Redis TIME) are taken,
--             oldest due first, so a caller whose clock runs ahead never fires early
--             (guarantee 9)
-- ARGV[9k+2]: limit
-- ARGV[9k+3]: lease deadline in ms
-- ARGV[9k+4]: owner (the claiming node), kept in the receipt
-- ARGV[9k+5]: most payload bytes to return (headers and last errors do not count), counting
--             those of the partitions before it in the call; at least one due task of each
--             partition is always taken
-- ARGV[9k+6..9k+9]: the queue's per-key limits, when it has flow keys: slots of one key (0:
--             none), fires of one key per period (0: none), the period in ms, '1' for FIFO
--             order. With any of them, a due task of a keyed id whose key has no free slot
--             is parked, and one whose key used up its rate waits in `due` until it may
--             fire; up to 1024 such tasks beyond `limit` are looked at per claim (flow.lua).
-- Returns: one reply per partition, in order, each { next pending due (string) or false,
--   count of claimed tasks, traces, held back (the partition's parked tasks after the claim;
--   0 without per-key limits), id1, record1, ..., then for each record moved to the dead
--   letters: id, reason }. `traces` is false when the partition holds none, else one entry
--   per claimed task, in order: its traceparent or false. Several partitions share a call only on a single master (Rust groups them;
--   on a Redis Cluster every call has one partition, one slot).
-- Each claimed record already carries its new claim number (the fencing token's), which is
-- max(previous claim + 1, Redis TIME in microseconds): growing per record, and never equal to
-- a claim of an earlier life of the same id (cancelled, then scheduled afresh at claim 0).
-- A due record that cannot be decoded is a poison pill: it moves to `dead` (guarantee 8) as a
-- version 1 record whose payload is the record as it was and whose last error says why; the
-- claim goes on with the others. A due entry without a record, or with a record cancelled
-- while it ran (generation 0), is dropped.
-- The receipt is '2' NUL owner NUL lease NUL id1 NUL claim1 NUL id2 ... (ids hold no NUL).
-- Speed: records are read in chunks (16, 32, 64, ... 1024) so that the byte budget stops the
-- read early; the ids come without scores when the first and the last of them share one due
-- (a burst due at one instant: no score is formatted per task); one ZREMRANGEBYRANK, one HSET
-- and one ZADD for the whole batch.

local now_us = redis_now_us()
local now_us_text = string.format('%d', now_us)
-- Payload bytes taken by the partitions before this one: the budget is the call's.
local spent = 0

local function claim_partition(k)
  local key, arg = 11 * k, 9 * k
  local due_key, tasks_key, inflight_key = KEYS[key + 1], KEYS[key + 2], KEYS[key + 3]
  local dead_key, receipt_key, paused_key = KEYS[key + 4], KEYS[key + 5], KEYS[key + 6]
  local traces_key = KEYS[key + 7]
  if paused_key and redis.call('EXISTS', paused_key) == 1 then
    return { false, -1 }
  end
  local lease, owner = ARGV[arg + 3], ARGV[arg + 4]
  local max_bytes = tonumber(ARGV[arg + 5])
  local now_ms = math.min(tonumber(ARGV[arg + 1]), math.floor(now_us / 1000))
  local limit = tonumber(ARGV[arg + 2])
  local upto = string.format('%d', now_ms)
  -- The per-key limits (nil: none) and the flow context.
  local lim, fc = nil, nil
  local slots, rate, period = tonumber(ARGV[arg + 6]), tonumber(ARGV[arg + 7]), tonumber(ARGV[arg + 8])
  if slots > 0 or rate > 0 or ARGV[arg + 9] == '1' then
    lim = { slots = slots > 0 and slots or nil, rate = rate > 0 and rate or nil, period = period,
      fifo = ARGV[arg + 9] == '1' }
    if lim.fifo then
      lim.slots = 1
    end
    fc = { due = due_key, flow = KEYS[key + 8], parked = KEYS[key + 9], fires = KEYS[key + 10],
      fire_times = KEYS[key + 11] }
    if lim.rate then
      -- The fires of keys idle for a period, a few per claim (the rest on the next ones).
      flow_forget_idle_fires(fc, now_ms - period + 1, 16)
    end
  end
  -- Tasks put back into `due` by this claim (representatives, unparked ones): added after
  -- the taken ones are removed by rank.
  local later = {}
  -- Whether this claim met a task of a flow key; the keys it found blocked (their later
  -- tasks in this claim park at once); the tasks it parked per key (counted at the end).
  local keyed, blocked_keys, parked_per_key = false, {}, {}
  -- Admissions so far in this call (tags each fire).
  local fires = 0
  -- With per-key limits, up to 1024 due tasks beyond `limit` are looked at when held-back
  -- ones took the places of the first (read on demand, below).
  local most = limit
  if lim then
    most = limit + 1024
  end
  -- ids[i], and scores[i] unless one due holds them all (then `common`).
  local ids = redis.call('ZRANGEBYSCORE', due_key, '-inf', upto, 'LIMIT', 0, limit)
  local n = #ids
  local scores, common = nil, nil
  if n > 0 then
    local first = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')[2]
    local last = n == 1 and first or redis.call('ZRANGE', due_key, n - 1, n - 1, 'WITHSCORES')[2]
    if first == last then
      common = first
    else
      local pairs_ = redis.call('ZRANGE', due_key, 0, n - 1, 'WITHSCORES')
      scores = {}
      for i = 1, n do
        scores[i] = pairs_[2 * i]
      end
    end
  end

  local out = { false, 0, false, 0 }
  local nout = 4
  local poisoned, records, leases, dead, forget, receipt = {}, {}, {}, {}, {}, {}
  local nrec, nlease, nreceipt = 0, 0, 0
  local claimed, taken, bytes, full = 0, 0, 0, false
  local first, chunk = 1, 16
  while first <= n and not full do
    local last = math.min(first + chunk - 1, n)
    local raws = redis.call('HMGET', tasks_key, unpack(ids, first, last))
    for j = 1, last - first + 1 do
      if claimed >= limit then
        full = true
        break
      end
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
      if raw and claimed > 0 and spent + bytes + size > max_bytes then
        full = true
        break
      end
      taken = taken + 1
      if raw then
        local id = ids[first + j - 1]
        local score = common or scores[first + j - 1]
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
          records[nrec + 1] = id
          records[nrec + 2] = encode_record(now_us, 1, 0, score, '', reason, raw)
          nrec = nrec + 2
          dead[#dead + 1] = now_ms
          dead[#dead + 1] = id
          poisoned[#poisoned + 1] = id
          poisoned[#poisoned + 1] = reason
        elseif gen == '0' then
          forget[#forget + 1] = id
        else
          local flow_key = lim and flow_key_of(id)
          local verdict, free_at = 'run', nil
          if flow_key then
            keyed = true
            -- Claimed before: a retry or a requeue, which may hold its key's slot (FIFO).
            local claimed_before = claim ~= '' and claim ~= '0'
            -- A key blocked earlier in this claim parks its later tasks at once, but for one
            -- that may hold its slot and for the key's representative (it waits in `due`).
            if blocked_keys[flow_key] and not claimed_before
                and not (lim.rate and redis.call('HGET', fc.flow, 'w' .. flow_key) == id) then
              verdict = 'park'
            else
              fires = fires + 1
              verdict, free_at = flow_admit(fc, inflight_key, id, flow_key, gen,
                claimed_before, now_ms, lim, now_us_text .. '.' .. fires)
              if verdict == 'wait' or (verdict == 'park' and free_at) then
                blocked_keys[flow_key] = true
              end
              if verdict == 'park' and lim.rate and redis.call('HGET', fc.flow, 'w' .. flow_key) == id then
                redis.call('HDEL', fc.flow, 'w' .. flow_key)
              end
            end
            if verdict == 'park' then
              flow_park(fc, flow_key, id, score)
              parked_per_key[flow_key] = (parked_per_key[flow_key] or 0) + 1
              if not blocked_keys[flow_key] then
                -- Parked for its own reason (an older run of its id): counted now, as a
                -- later task of its key may run in this claim.
                count_parked(fc, flow_key, parked_per_key[flow_key])
                parked_per_key[flow_key] = nil
              end
            elseif verdict == 'wait' then
              later[#later + 1] = { string.format('%d', free_at), id }
              if due == '' then
                -- Its score moves to the time its key may fire: the record keeps its due
                -- (as a requeued one does), so the fire reports the wait as lateness.
                records[nrec + 1] = id
                records[nrec + 2] = '1|' .. gen .. '|' .. attempt .. '|' .. claim .. '|' .. score
                  .. '|' .. string.sub(raw, sched_at)
                nrec = nrec + 2
              end
            end
          end
          if verdict == 'run' then
          if claim ~= '' and tonumber(claim) >= now_us then
            claim = string.format('%d', tonumber(claim) + 1)
          else
            claim = now_us_text
          end
          -- Spliced, not re-encoded: a new claim number, and the due made explicit (the
          -- record must keep it once the task leaves `due`); the rest is copied as it is.
          local record = '1|' .. gen .. '|' .. attempt .. '|' .. claim .. '|'
            .. (due ~= '' and due or score) .. '|' .. string.sub(raw, sched_at)
          bytes = bytes + size
          records[nrec + 1] = id
          records[nrec + 2] = record
          nrec = nrec + 2
          leases[nlease + 1] = lease
          leases[nlease + 2] = id
          nlease = nlease + 2
          out[nout + 1] = id
          out[nout + 2] = record
          nout = nout + 2
          receipt[nreceipt + 1] = id
          receipt[nreceipt + 2] = claim
          nreceipt = nreceipt + 2
          claimed = claimed + 1
          if flow_key then
            if parked_per_key[flow_key] then
              count_parked(fc, flow_key, parked_per_key[flow_key])
              parked_per_key[flow_key] = nil
            end
            -- free_at: with 'run', the key's slots held after this claim.
            flow_unpark_spare(fc, flow_key, free_at, lim, later)
          end
          end
        end
      end
    end
    first = last + 1
    chunk = math.min(chunk * 2, 1024)
    if first > n and not full and claimed < limit and n == first - 1 and n < most and n >= limit then
      -- Every due task read so far was taken and some were held back: read the next ones
      -- (ranks are unchanged: nothing leaves `due` before the end).
      local more = redis.call('ZRANGEBYSCORE', due_key, '-inf', upto, 'WITHSCORES', 'LIMIT', n,
        math.min(most - n, math.max(limit - claimed, n)))
      if #more > 0 and not scores then
        scores = {}
        for i = 1, n do
          scores[i] = common
        end
        common = nil
      end
      for i = 1, #more / 2 do
        ids[n + i] = more[2 * i - 1]
        scores[n + i] = more[2 * i]
      end
      n = n + #more / 2
    end
  end

  if taken > 0 then
    -- ZRANGEBYSCORE from -inf returned the first members by rank: drop those taken by rank.
    redis.call('ZREMRANGEBYRANK', due_key, 0, taken - 1)
  end
  for _, entry in ipairs(later) do
    redis.call('ZADD', due_key, entry[1], entry[2])
  end
  if keyed then
    -- For the scripts that end attempts: whether a retry keeps its key's slot.
    redis.call('HSET', fc.flow, 'f', lim.fifo and '1' or '0')
    for flow_key, parked in pairs(parked_per_key) do
      count_parked(fc, flow_key, parked)
    end
  end
  if nrec > 0 then
    call_in_chunks('HSET', tasks_key, records)
  end
  if nlease > 0 then
    call_in_chunks('ZADD', inflight_key, leases)
    -- The receipt lives as long as the lease: after that, lease expiry brings the tasks back.
    local ttl = math.max(tonumber(lease) - now_ms, 1000)
    redis.call('SET', receipt_key, '2\0' .. owner .. '\0' .. lease .. '\0' .. table.concat(receipt, '\0'),
      'PX', string.format('%d', ttl))
  end
  if #dead > 0 then
    call_in_chunks('ZADD', dead_key, dead)
  end
  if #forget > 0 then
    call_in_chunks('HDEL', tasks_key, forget)
  end

  out[2] = claimed
  if lim then
    out[4] = redis.call('ZCARD', fc.parked)
  end
  if claimed > 0 and redis.call('EXISTS', traces_key) == 1 then
    local claimed_ids = {}
    for i = 1, claimed do
      claimed_ids[i] = out[3 + 2 * i]
    end
    out[3] = read_in_chunks('HMGET', traces_key, claimed_ids)
  end
  spent = spent + bytes
  local next_due = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
  if next_due[2] then
    out[1] = next_due[2]
  end
  for i = 1, #poisoned do
    out[nout + i] = poisoned[i]
  end
  return out
end

local replies = {}
for k = 0, #KEYS / 11 - 1 do
  replies[k + 1] = claim_partition(k)
end
return replies
