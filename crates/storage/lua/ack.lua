-- ack.lua: handlers succeeded; completes each task whose token still holds its lease, in one
-- or more partitions.
-- For each partition k = 0, 1, ... (several share a call only on a single master):
-- KEYS[3k+1]: tasks      HASH id -> record
-- KEYS[3k+2]: inflight   ZSET id -> lease deadline
-- KEYS[3k+3]: done       ZSET id -> completed_ms
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
-- Speed: per partition one HMGET and one ZMSCORE to read, one call per kind of write.

local keep_done = tonumber(ARGV[1]) > 0
-- A string: Lua numbers handed to redis.call are formatted with %.17g, once per task.
local now = keep_done and string.format('%d', redis_now_ms()) or '0'
local out = {}
local nout = 0

local function ack_partition(tasks_key, inflight_key, done_key, base, count)
  local ids = {}
  for i = 1, count do
    ids[i] = ARGV[base + 3 * i - 2]
  end
  local raws = read_in_chunks('HMGET', tasks_key, ids)
  local leases = read_in_chunks('ZMSCORE', inflight_key, ids)

  local leave, records, stamps, forget = {}, {}, {}, {}
  local function write()
    call_in_chunks('ZREM', inflight_key, leave)
    call_in_chunks('HSET', tasks_key, records)
    call_in_chunks('ZADD', done_key, stamps)
    call_in_chunks('HDEL', tasks_key, forget)
    leave, records, stamps, forget = {}, {}, {}, {}
  end

  local seen = {}
  for k, id in ipairs(ids) do
    local verdict_at = nout + k
    local raw, in_flight = raws[k], leases[k]
    if seen[id] then
      -- The same id earlier in this call: what was read is out of date.
      write()
      raw = redis.call('HGET', tasks_key, id)
      in_flight = redis.call('ZSCORE', inflight_key, id)
    end
    seen[id] = true
    local verdict, detail = judge_token(raw, in_flight, ARGV[base + 3 * k - 1], ARGV[base + 3 * k])
    local done_record
    if verdict == 'ok' and keep_done then
      local errlen, err_at = string.match(raw, TAIL_FIELDS, detail)
      if errlen == '' then
        -- The header as it is: the payload is all a completed task drops.
        done_record = string.sub(raw, 1, err_at - 1)
      else
        -- It failed before: the done record keeps no error either.
        local rec, reason = decode_record(raw)
        if rec then
          done_record = encode_record(rec.gen, rec.attempt, rec.claim, rec.due, rec.sched, '', '')
        else
          verdict, detail = 'corrupt', reason
        end
      end
    end
    if verdict == 'ok' then
      leave[#leave + 1] = id
      if keep_done then
        records[#records + 1] = id
        records[#records + 1] = done_record
        stamps[#stamps + 1] = now
        stamps[#stamps + 1] = id
      else
        forget[#forget + 1] = id
      end
      out[verdict_at] = 'C'
    elseif verdict == 'superseded' then
      if detail and in_flight then
        leave[#leave + 1] = id
      end
      out[verdict_at] = 'S'
    elseif verdict == 'cancelled' then
      leave[#leave + 1] = id
      forget[#forget + 1] = id
      out[verdict_at] = 'S'
    elseif verdict == 'stale' then
      out[verdict_at] = 'L'
    else
      out[verdict_at] = 'X' .. detail
    end
  end
  write()
  nout = nout + count
end

local base = 2
for k = 0, #KEYS / 3 - 1 do
  local count = tonumber(ARGV[base])
  ack_partition(KEYS[3 * k + 1], KEYS[3 * k + 2], KEYS[3 * k + 3], base, count)
  base = base + 1 + 3 * count
end
return out
