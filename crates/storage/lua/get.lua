-- get.lua: reads one task and where it is, atomically.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- KEYS[5]: done       ZSET id -> completed_ms
-- KEYS[6]: traces     HASH id -> traceparent (absent while the partition holds none)
-- KEYS[7]: flow       HASH (flow.lua): a parked task is pending at the time kept there
-- ARGV[1]: id
-- ARGV[2]: executed retention in ms (a done entry older than this, by Redis TIME, is not reported)
-- Returns: nil, or { raw record, state, score, traceparent or false } with state 'pending'
-- (score: due), 'inflight' (lease deadline), 'dead' (failed_ms) or 'done' (completed_ms; a
-- completed task's trace is gone, so false). Pending wins over inflight: an id scheduled again
-- while it ran is reported as its new, pending self, with the new schedule's trace.

local id = ARGV[1]
local raw = redis.call('HGET', KEYS[2], id)
if not raw then
  return nil
end
-- A live task's trace (HGET of a missing key or field is nil: false in the reply).
local function live(state, score)
  return { raw, state, score, redis.call('HGET', KEYS[6], id) }
end
local score = redis.call('ZSCORE', KEYS[1], id)
if score then
  return live('pending', score)
end
score = redis.call('HGET', KEYS[7], 'p' .. id)
if score then
  return live('pending', string.format('%d', tonumber(score)))
end
score = redis.call('ZSCORE', KEYS[3], id)
if score then
  return live('inflight', score)
end
score = redis.call('ZSCORE', KEYS[4], id)
if score then
  return live('dead', score)
end
score = redis.call('ZSCORE', KEYS[5], id)
if score then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now - tonumber(score) < tonumber(ARGV[2]) then
    return { raw, 'done', score, false }
  end
end
return nil
