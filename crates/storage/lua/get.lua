-- get.lua: reads one task and where it is, atomically.
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: dead       ZSET id -> failed_ms
-- KEYS[5]: done       ZSET id -> completed_ms
-- ARGV[1]: id
-- ARGV[2]: executed retention in ms (a done entry older than this, by Redis TIME, is not reported)
-- Returns: nil, or { raw record, state, score } with state 'pending' (score: due),
-- 'inflight' (lease deadline), 'dead' (failed_ms) or 'done' (completed_ms). Pending wins over
-- inflight: an id scheduled again while it ran is reported as its new, pending self.

local id = ARGV[1]
local raw = redis.call('HGET', KEYS[2], id)
if not raw then
  return nil
end
local score = redis.call('ZSCORE', KEYS[1], id)
if score then
  return { raw, 'pending', score }
end
score = redis.call('ZSCORE', KEYS[3], id)
if score then
  return { raw, 'inflight', score }
end
score = redis.call('ZSCORE', KEYS[4], id)
if score then
  return { raw, 'dead', score }
end
score = redis.call('ZSCORE', KEYS[5], id)
if score then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now - tonumber(score) < tonumber(ARGV[2]) then
    return { raw, 'done', score }
  end
end
return nil
