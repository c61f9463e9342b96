-- lease.lua: the check of a lease token (id, generation, claim) shared by ack, fail and
-- renew. Needs record.lua in front of it.

-- The error reply for a lease token that no longer holds its lease; Rust: StaleLease.
local function stale()
  return redis.error_reply('DELAYQ_STALE the token no longer holds the lease')
end

-- Judges a lease token (generation, claim) against the task's record `raw` (or false) and
-- whether the id is in flight. Returns one of:
--   'ok', record                the token holds the lease
--   'superseded', owns_entry    the task was cancelled or scheduled again after the claim;
--                               owns_entry: the in-flight entry (if any) is still this claim's
--   'stale'                     the lease was lost (requeued, or claimed again)
--   'cancelled', record         the token holds the lease, but the task was cancelled while
--                               it ran (generation 0): this attempt is its last
--   'corrupt', reason
-- Generations are never reused for an id (a fresh record starts at Redis TIME in µs, a
-- reschedule adds 1), and claim numbers never repeat either (see claim_due.lua): so when the
-- generation differs but the claim matches, the record was rescheduled from this very claim.
local function judge_token(raw, in_flight, gen, claim)
  if not raw then
    return 'superseded', true
  end
  local rec, reason = decode_record(raw)
  if not rec then
    return 'corrupt', reason
  end
  if rec.gen == 0 then
    if rec.claim == claim and in_flight then
      return 'cancelled', rec
    end
    return 'stale'
  end
  if rec.gen ~= gen then
    return 'superseded', rec.claim == claim
  end
  if rec.claim ~= claim or not in_flight then
    return 'stale'
  end
  return 'ok', rec
end

-- judge_token for one token, reading what it needs. Returns the verdict, its detail, and the
-- raw record.
local function check_token(tasks_key, inflight_key, id, gen, claim)
  local raw = redis.call('HGET', tasks_key, id)
  local in_flight = redis.call('ZSCORE', inflight_key, id)
  local verdict, detail = judge_token(raw, in_flight, gen, claim)
  return verdict, detail, raw
end

-- The reply for a token that does not hold its lease (any verdict of judge_token but 'ok'),
-- or nil when it does. A superseded token drops its claim's in-flight entry, if still there;
-- a cancelled one ends the task (its record and in-flight entry go) and answers like a
-- superseded one.
local function refuse_token(verdict, detail, id, tasks_key, inflight_key, superseded_reply)
  if verdict == 'cancelled' then
    redis.call('ZREM', inflight_key, id)
    redis.call('HDEL', tasks_key, id)
    return superseded_reply
  elseif verdict == 'corrupt' then
    return corrupt(id, detail)
  elseif verdict == 'stale' then
    return stale()
  elseif verdict == 'superseded' then
    if detail then
      redis.call('ZREM', inflight_key, id)
    end
    return superseded_reply
  end
  return nil
end
