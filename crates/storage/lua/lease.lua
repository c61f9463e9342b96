-- lease.lua: the check of a lease token (id, generation, claim) shared by ack, fail and
-- renew. Needs record.lua in front of it.

-- The error reply for a lease token that no longer holds its lease; Rust: StaleLease.
local function stale()
  return redis.error_reply('DELAYQ_STALE the token no longer holds the lease')
end

-- Judges a lease token (generation, claim: decimal strings, as stored) against the task's
-- record `raw` (or false) and whether the id is in flight. Returns one of:
--   'ok', after                 the token holds the lease; `after` is the position after the
--                               record's claim field (see TAIL_FIELDS)
--   'superseded', owns_entry    the task was scheduled again after the claim, or is gone;
--                               owns_entry: the in-flight entry (if any) is still this claim's
--   'stale'                     the lease was lost (requeued, or claimed again)
--   'cancelled'                 the token holds the lease, but the task was cancelled while
--                               it ran (generation 0): this attempt is its last
--   'corrupt', reason
-- Only the generation and claim are read (one match, string compares): the payload is never
-- decoded. Generations are never reused for an id (a fresh record starts at Redis TIME in
-- µs, a reschedule adds 1), and claim numbers never repeat either (see claim_due.lua): so
-- when the generation differs but the claim matches, the record was rescheduled from this
-- very claim.
local function judge_token(raw, in_flight, gen, claim)
  if not raw then
    return 'superseded', true
  end
  local rec_gen, rec_claim, after = string.match(raw, LEASE_FIELDS)
  if not rec_gen then
    local _, reason = decode_record(raw)
    return 'corrupt', reason or 'malformed version 1 header'
  end
  if rec_claim == '' then
    rec_claim = '0'
  end
  if rec_gen == '0' then
    if rec_claim == claim and in_flight then
      return 'cancelled'
    end
    return 'stale'
  end
  if rec_gen ~= gen then
    return 'superseded', rec_claim == claim
  end
  if rec_claim ~= claim or not in_flight then
    return 'stale'
  end
  return 'ok', after
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
