-- ack.lua: handlers succeeded; completes each task whose token still holds its lease.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: inflight   ZSET id -> lease deadline
-- KEYS[3]: done       ZSET id -> completed_ms
-- ARGV[1]: executed retention in ms (0: no done entry is kept, the record is deleted)
-- ARGV[3k-1], ARGV[3k], ARGV[3k+1] for k = 1, 2, ...: id, generation, claim of token k
-- Returns: one verdict per token, in order:
--   'C' completed: the task left in-flight; its record shrank to what dedup needs (counters
--       and due times; no payload, no error) and `done` holds it, scored by Redis TIME;
--   'S' superseded: scheduled again meanwhile; the new schedule stands and only this claim's
--       in-flight entry is dropped; or cancelled while it ran: the task is forgotten (no done
--       entry: a later get finds nothing);
--   'L' the token lost its lease (requeued, claimed again): nothing changed;
--   'X<reason>' the record is corrupt: nothing changed.
-- Tokens of one call are judged as if acked one after the other (a repeated id is read again).
-- Speed: one HMGET and one ZMSCORE to read, one call per kind of write, for the whole call.

local tasks_key, inflight_key, done_key = KEYS[1], KEYS[2], KEYS[3]
local keep_done = tonumber(ARGV[1]) > 0
local ids = {}
for i = 2, #ARGV, 3 do
  ids[#ids + 1] = ARGV[i]
end
local raws = read_in_chunks('HMGET', tasks_key, ids)
local leases = read_in_chunks('ZMSCORE', inflight_key, ids)
-- A string: Lua numbers handed to redis.call are formatted with %.17g, once per task.
local now = keep_done and string.format('%d', redis_now_ms()) or '0'

local leave, records, stamps, forget = {}, {}, {}, {}
local function write()
  call_in_chunks('ZREM', inflight_key, leave)
  call_in_chunks('HSET', tasks_key, records)
  call_in_chunks('ZADD', done_key, stamps)
  call_in_chunks('HDEL', tasks_key, forget)
  leave, records, stamps, forget = {}, {}, {}, {}
end

local seen = {}
local out = {}
for k, id in ipairs(ids) do
  local raw, in_flight = raws[k], leases[k]
  if seen[id] then
    -- The same id earlier in this call: what was read is out of date.
    write()
    raw = redis.call('HGET', tasks_key, id)
    in_flight = redis.call('ZSCORE', inflight_key, id)
  end
  seen[id] = true
  local verdict, detail = judge_token(raw, in_flight, ARGV[3 * k], ARGV[3 * k + 1])
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
    out[k] = 'C'
  elseif verdict == 'superseded' then
    if detail and in_flight then
      leave[#leave + 1] = id
    end
    out[k] = 'S'
  elseif verdict == 'cancelled' then
    leave[#leave + 1] = id
    forget[#forget + 1] = id
    out[k] = 'S'
  elseif verdict == 'stale' then
    out[k] = 'L'
  else
    out[k] = 'X' .. detail
  end
end
write()
return out
