-- look.lua: an owner's look at one of its partitions, in one call: the lease sweep, the
-- executed-set pruning and the prefetch read, plus what the owner needs to know when to look
-- again (the earliest due after the window, the earliest lease deadline in flight). An idle
-- partition costs its owner this one call per look (DESIGN.md, "Cost model").
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: tasks      HASH id -> record
-- KEYS[3]: inflight   ZSET id -> lease deadline
-- KEYS[4]: done       ZSET id -> completed_ms
-- KEYS[5], KEYS[6]: flow, parked (flow.lua): the holds of requeued tasks end, and a flow key
--          whose parked tasks wait for a release that cannot come is repaired
-- ARGV[1]: now_ms of the caller; leases are judged at min(now_ms, Redis TIME) (guarantee 9)
-- ARGV[2]: end of the prefetch window (ms): pending tasks due at or before it are returned
-- ARGV[3]: the most window entries returned
-- ARGV[4]: the most expired leases put back
-- ARGV[5]: completed records older than this (ms) are forgotten; 0 forgets none
-- ARGV[6]: the most completed records forgotten
-- Returns: { requeued ids, pruned count, { id, due, id, due, ... } of the window,
--            earliest due after the window or false (also false when the window is full),
--            earliest lease deadline still in flight or false }

local due_key, tasks_key, inflight_key, done_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local fc = { due = due_key, flow = KEYS[5], parked = KEYS[6] }
-- Each step reads the head of its set first, so that a look at an idle partition (nothing in
-- flight, nothing due within the window) runs three reads and nothing else.
local requeued = {}
local lease = redis.call('ZRANGE', inflight_key, 0, 0, 'WITHSCORES')
if #lease == 2 and tonumber(lease[2]) < tonumber(ARGV[1]) then
  local now = string.format('%d', math.min(tonumber(ARGV[1]), redis_now_ms()))
  requeued = requeue_leases(due_key, tasks_key, inflight_key, now, tonumber(ARGV[4]), fc)
  lease = redis.call('ZRANGE', inflight_key, 0, 0, 'WITHSCORES')
end
if redis.call('EXISTS', fc.parked) == 1 then
  flow_repair(fc, 16)
end
local earliest_lease = false
if #lease == 2 then
  earliest_lease = lease[2]
end
local pruned = 0
if tonumber(ARGV[5]) > 0 then
  pruned = prune_completed(tasks_key, done_key, ARGV[5], tonumber(ARGV[6]))
end
local limit = tonumber(ARGV[3])
local window, next_due = {}, false
local head = redis.call('ZRANGE', due_key, 0, 0, 'WITHSCORES')
if #head == 2 then
  if tonumber(head[2]) > tonumber(ARGV[2]) then
    next_due = head[2]
  else
    window = redis.call('ZRANGEBYSCORE', due_key, '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, limit)
    if #window < 2 * limit then
      local after = redis.call('ZRANGEBYSCORE', due_key, '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      if #after == 2 then
        next_due = after[2]
      end
    end
  end
end
return { requeued, pruned, window, next_due, earliest_lease }
