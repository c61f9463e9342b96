-- sweep.lua: the lease sweep and the executed-set pruning, shared by requeue_expired.lua,
-- prune_done.lua and look.lua (put in front of them, after record.lua and util.lua).

-- Puts in-flight tasks whose lease ran out before `now` (a string of digits) back into `due`
-- at `now`, up to `limit` of them; returns the ids put back. An id already pending again
-- (scheduled while it ran) or without a record only loses its in-flight entry; a task
-- cancelled while it ran (generation 0) is dropped, record and all: its last attempt is over.
-- `fc` (flow.lua): the flow-key slots of the leases taken out of flight come back (a requeued
-- task keeps its slot with FIFO order).
local function requeue_leases(due_key, tasks_key, inflight_key, now, limit, fc)
  local ids = redis.call('ZRANGEBYSCORE', inflight_key, '-inf', '(' .. now, 'LIMIT', 0, limit)
  local requeued = {}
  local flowing = #ids > 0 and redis.call('EXISTS', fc.flow) == 1
  for _, id in ipairs(ids) do
    if redis.call('ZSCORE', due_key, id) or (flowing and flow_parked_at(fc, id)) then
      -- Scheduled again while it ran: the old run is over, and so is its slot.
      if flowing then
        flow_release(fc, id)
      end
    else
      local raw = redis.call('HGET', tasks_key, id)
      if raw and is_cancelled_raw(raw) then
        redis.call('HDEL', tasks_key, id)
        if flowing then
          flow_release(fc, id)
        end
      elseif raw then
        redis.call('ZADD', due_key, now, id)
        requeued[#requeued + 1] = id
        if flowing then
          flow_release_for_retry(fc, id, string.match(raw, '^%d+|(%d+)|'))
        end
      elseif flowing then
        flow_release(fc, id)
      end
    end
  end
  if #ids > 0 then
    call_in_chunks('ZREM', inflight_key, ids)
  end
  return requeued
end

-- Forgets up to `limit` completed tasks (executed-set entries and their records) that
-- completed strictly before `older_than`; returns how many.
local function prune_completed(tasks_key, done_key, older_than, limit)
  local ids = redis.call('ZRANGEBYSCORE', done_key, '-inf', '(' .. older_than, 'LIMIT', 0, limit)
  if #ids > 0 then
    call_in_chunks('HDEL', tasks_key, ids)
    call_in_chunks('ZREM', done_key, ids)
  end
  return #ids
end
