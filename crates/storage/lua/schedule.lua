-- schedule.lua: schedules one or more tasks of one partition (upsert or if-absent, with dedup).
-- KEYS[1]: due        ZSET id -> due_ms of pending tasks
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: done       ZSET id -> completed_ms (executed-set)
-- KEYS[5]: dead       ZSET id -> failed_ms
-- ARGV[1]: mode, 'upsert' or 'if_absent'
-- ARGV[2]: executed retention in ms (an (id, due) that completed less than this long ago, by
--          Redis TIME, is a duplicate; 0 turns dedup off)
-- ARGV[3k], ARGV[3k+1], ARGV[3k+2] for k = 1, 2, ...: id, due_ms, payload of item k
-- Returns: a flat array with two entries per item, in order:
--   'created', ''  |  'replaced', previous due  |  'kept', due  |  'duplicate', ''
--   |  'corrupt', reason (that item is left alone; the others proceed)
-- A new id starts at generation = Redis TIME in µs, so an id cancelled and scheduled again
-- never reuses a generation; each later schedule of a live or completed id adds 1.
-- An id in flight that is scheduled again gets a new record (generation + 1, attempt 1) and
-- goes back into `due`; its in-flight entry stays until the running handler acks (Superseded)
-- or its lease expires. The claim number carries over so the old token is still recognised.

local due_key, tasks_key, inflight_key, done_key, dead_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local if_absent = ARGV[1] == 'if_absent'
local retention = tonumber(ARGV[2])
local now_ms, now_us = nil, nil
local out = {}

for i = 3, #ARGV, 3 do
  local id, due, payload = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local verdict, detail = 'created', ''
  local gen, claim = nil, 0
  local raw = redis.call('HGET', tasks_key, id)
  if raw then
    local rec, reason = decode_record(raw)
    if not rec then
      verdict, detail = 'corrupt', reason
    else
      gen, claim = rec.gen + 1, rec.claim
      local pending = redis.call('ZSCORE', due_key, id)
      local live = pending or redis.call('ZSCORE', inflight_key, id)
      local dead = false
      if not live then
        dead = redis.call('ZSCORE', dead_key, id)
        live = dead
      end
      if live then
        verdict, detail = if_absent and 'kept' or 'replaced', pending or rec.due
        if dead and not if_absent then
          redis.call('ZREM', dead_key, id)
        end
      else
        local done = redis.call('ZSCORE', done_key, id)
        if done then
          now_ms = now_ms or redis_now_ms()
          if retention > 0 and sched_of(rec) == due and now_ms - tonumber(done) < retention then
            verdict = 'duplicate'
          else
            redis.call('ZREM', done_key, id)
          end
        end
      end
    end
  end
  if verdict == 'created' or verdict == 'replaced' then
    if gen == nil then
      now_us = now_us or redis_now_us()
      gen = now_us
    end
    redis.call('HSET', tasks_key, id, encode_record(gen, 1, claim, '', '', '', payload))
    redis.call('ZADD', due_key, due, id)
  end
  out[#out + 1] = verdict
  out[#out + 1] = detail
end
return out
