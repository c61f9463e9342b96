-- ack.lua: handlers succeeded; completes each task whose token still holds its lease, in one
-- or more partitions.
-- For each partition k = 0, 1, ... (several share a call only on a single master):
-- KEYS[7k+1]: tasks      HASH id -> record
-- KEYS[7k+2]: inflight   ZSET id -> lease deadline
-- KEYS[7k+3]: done       ZSET id -> completed_ms
-- KEYS[7k+4]: traces     HASH id -> traceparent: a completed task's is dropped
-- KEYS[7k+5..7k+7]: due, flow, parked: a task this ack takes out of `inflight` gives its
--             flow key's slot back, and the key's next parked task goes back to `due`
--             (flow.lua)
-- ARGV[1]: executed retention in ms (0: no done entry is kept, the record is deleted)
-- then for each partition, in order: the count n of its tokens, then n times: id,
-- generation, claim
-- Returns: one verdict per token, in the order of the tokens:
--   'C' completed: the task left in-flight; its record shrank to what dedup needs (counters
--       and due times; no payload, no error) and `done` holds it, scored by Redis TIME;
--   'S' superseded: scheduled again meanwhile; the new schedule stands and only this claim's
--       in-flight entry is dropped; or cancelled while it ran: the task is forgotten (no done
--       entry: a later get finds nothing);
--   'L' the token lost its lease (requeued, claimed again): nothing changed;
--   'X<reason>' the record is corrupt: nothing changed.
-- Tokens of one partition are judged as if acked one after the other (a repeated id is read
-- again).
-- Speed: per partition one HMGET, then per token one anchored match and one ZREM (whose answer
-- says whether the claim still held the task: an in-flight check without ZMSCORE, whose
-- scores Redis 7.0 formats with printf), then one call per kind of write.

local keep_done = tonumber(ARGV[1]) > 0
-- A string: Lua numbers handed to redis.call are formatted with %.17g, once per task.
local now = keep_done and string.format('%d', redis_now_ms()) or '0'
local out = {}
local nout = 0

-- The token's task left in flight (its entry was there and is gone now): its done record,
-- or nil, reason when the record is corrupt. `errlen`, `err_at`: from ACK_FIELDS, when it
-- matched.
local function done_record_of(raw, errlen, err_at)
  if not keep_done then
    -- No done entry is kept: the record goes, whatever it holds.
    return ''
  end
  if errlen == '' then
    -- The header as it is: the payload is all a completed task drops.
    return string.sub(raw, 1, err_at - 1)
  end
  -- It failed before: the done record keeps no error either.
  local rec, reason = decode_record(raw)
  if not rec then
    return nil, reason
  end
  return encode_record(rec.gen, rec.attempt, rec.claim, rec.due, rec.sched, '', '')
end

local function ack_partition(tasks_key, inflight_key, done_key, traces_key, fc, base, count)
  -- The tasks that ended here (completed, or cancelled while they ran): their traces go.
  local ended = {}
  -- Whether any task of the partition holds or waits for a flow key, and whether any is
  -- parked (asked once per partition).
  local flowing = redis.call('EXISTS', fc.flow) == 1
  fc.none_parked = flowing and redis.call('EXISTS', fc.parked) == 0
  local ids = {}
  for i = 1, count do
    ids[i] = ARGV[base + 3 * i - 2]
  end
  local raws = read_in_chunks('HMGET', tasks_key, ids)

  local records, stamps, forget = {}, {}, {}
  local nrec, nforget = 0, 0
  local function write()
    if nrec > 0 then
      call_in_chunks('HSET', tasks_key, records)
      call_in_chunks('ZADD', done_key, stamps)
    end
    if nforget > 0 then
      call_in_chunks('HDEL', tasks_key, forget)
    end
    records, stamps, forget, nrec, nforget = {}, {}, {}, 0, 0
  end
  -- The task is done: its record shrinks to `done_record` (or goes, without retention).
  local function complete(id, done_record)
    ended[#ended + 1] = id
    if keep_done then
      records[nrec + 1] = id
      records[nrec + 2] = done_record
      stamps[nrec + 1] = now
      stamps[nrec + 2] = id
      nrec = nrec + 2
    else
      nforget = nforget + 1
      forget[nforget] = id
    end
  end

  -- The verdict for a token whose record is its claim's: 'C' if the task was still in flight
  -- (it leaves now), 'L' if not; 'X' for a corrupt record of a task in flight (a stale token
  -- is stale first, as lease.lua judges).
  local function finish(id, done_record, reason)
    if not done_record then
      if redis.call('ZSCORE', inflight_key, id) then
        return 'X' .. reason
      end
      return 'L'
    end
    if redis.call('ZREM', inflight_key, id) == 1 then
      complete(id, done_record)
      return 'C', true
    end
    return 'L'
  end

  local seen = {}
  for k = 1, count do
    local id = ids[k]
    local raw = raws[k]
    if seen[id] then
      -- The same id earlier in this call: what was read is out of date.
      write()
      raw = redis.call('HGET', tasks_key, id)
    end
    seen[id] = true
    local gen, claim = ARGV[base + 3 * k - 1], ARGV[base + 3 * k]
    -- Whether this ack took the task out of `inflight` (then its flow key's slot comes back).
    local verdict, released
    local rec_gen, rec_claim, errlen, err_at
    if raw then
      rec_gen, rec_claim, errlen, err_at = string.match(raw, ACK_FIELDS)
    end
    if rec_gen == gen and rec_claim == claim then
      -- The common case: the record is this very claim's (a claim number is never 0 and a
      -- generation never 0 in a token), so the lease holds if the entry is still in flight.
      verdict, released = finish(id, done_record_of(raw, errlen, err_at))
    else
      -- Everything else, judged as lease.lua does, with the entry's presence asked only
      -- where it decides (ZREM again: a verdict that drops the entry drops it there).
      local judged, detail = judge_token(raw, true, gen, claim)
      if judged == 'ok' then
        verdict, released = finish(id, done_record_of(raw, string.match(raw, TAIL_FIELDS, detail)))
      elseif judged == 'superseded' then
        if detail then
          released = redis.call('ZREM', inflight_key, id) == 1
        end
        verdict = 'S'
      elseif judged == 'cancelled' then
        if redis.call('ZREM', inflight_key, id) == 1 then
          nforget = nforget + 1
          forget[nforget] = id
          ended[#ended + 1] = id
          verdict = 'S'
          released = true
        else
          verdict = 'L'
        end
      elseif judged == 'stale' then
        verdict = 'L'
      else
        verdict = 'X' .. detail
      end
    end
    out[nout + k] = verdict
    if flowing and released then
      flow_release(fc, id)
    end
  end
  write()
  if #ended > 0 and redis.call('EXISTS', traces_key) == 1 then
    call_in_chunks('HDEL', traces_key, ended)
  end
  nout = nout + count
end

local base = 2
for k = 0, #KEYS / 7 - 1 do
  local count = tonumber(ARGV[base])
  local fc = { due = KEYS[7 * k + 5], flow = KEYS[7 * k + 6], parked = KEYS[7 * k + 7] }
  ack_partition(KEYS[7 * k + 1], KEYS[7 * k + 2], KEYS[7 * k + 3], KEYS[7 * k + 4], fc, base, count)
  base = base + 1 + 3 * count
end
return out
