-- ack.lua: a handler succeeded; completes the task if its token still holds the lease.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: inflight   ZSET id -> lease deadline
-- KEYS[3]: done       ZSET id -> completed_ms
-- ARGV[1]: id
-- ARGV[2]: generation of the token
-- ARGV[3]: claim number of the token
-- ARGV[4]: executed retention in ms (0: no done entry is kept, the record is deleted)
-- Returns: 'completed' (the task left in-flight; its record shrank to what dedup needs: the
-- counters and due times, no payload, no error; `done` holds it scored by Redis TIME) or
-- 'superseded' (cancelled or scheduled again meanwhile: the new schedule stands, only this
-- claim's in-flight entry is dropped). Errors: DELAYQ_STALE (nothing changed), DELAYQ_CORRUPT.

local tasks_key, inflight_key, done_key = KEYS[1], KEYS[2], KEYS[3]
local id = ARGV[1]
local verdict, detail = check_token(tasks_key, inflight_key, id, tonumber(ARGV[2]), tonumber(ARGV[3]))
local refusal = refuse_token(verdict, detail, id, inflight_key, 'superseded')
if refusal then
  return refusal
end

local rec = detail
redis.call('ZREM', inflight_key, id)
if tonumber(ARGV[4]) > 0 then
  redis.call('HSET', tasks_key, id, encode_record(rec.gen, rec.attempt, rec.claim, rec.due, rec.sched, '', ''))
  redis.call('ZADD', done_key, redis_now_ms(), id)
else
  redis.call('HDEL', tasks_key, id)
end
return 'completed'
