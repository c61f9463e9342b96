-- heartbeat: registers or refreshes this node, removes the members whose heartbeat expired,
-- and announces a change. At most one epoch bump per call, and only when the member set
-- changed; EXISTS and HDEL run atomically, so two nodes removing the same dead member at the
-- same time bump the epoch once between them. Also used to join (with no members to check).
--
-- A stall is not a death. When this node's own heartbeat had expired although its entry is
-- still registered, nobody removed it while it was silent: Redis stood still for longer than
-- the TTL (DEBUG SLEEP, a fork, a slow fsync; every heartbeat expired at once), or this node
-- did (a GC pause, SIGSTOP) and came back before anyone noticed. Either way the others'
-- expired heartbeats prove nothing yet: the script sets the stall marker for one TTL, and
-- while it is set no heartbeat removes anybody, so that every live node gets one full TTL to
-- beat again (their requests queued during a Redis stall may run in any order after it).
-- A failover is a stall too: nobody could write while the master changed (a Sentinel
-- promotion, a Cluster failover of the `{cluster}` slot), and the new master may miss the
-- last refreshes. So a long gap since this node's previous heartbeat (measured on the
-- server's TIME: ARGV[7], ARGV[8]) sets the marker as well, even when this node's own key
-- survived the gap: the others' keys, refreshed up to one period earlier, may not have.
-- A node removed while it was away finds its entry gone instead: it re-registers (added = 1)
-- and sets no marker unless its gap was long.
--
-- KEYS[1]   registry   HASH   node id -> JSON entry
-- KEYS[2]   epoch      STRING membership epoch
-- KEYS[3]   heartbeat  STRING this node's heartbeat (expires after the TTL)
-- KEYS[4]   stall      STRING set for one TTL after a stall was seen: nobody is removed
-- KEYS[5..] heartbeat keys of other members to check, in the order of ARGV[9..]
-- ARGV[1]   this node's id
-- ARGV[2]   this node's JSON entry (with its new last heartbeat)
-- ARGV[3]   heartbeat TTL in milliseconds
-- ARGV[4]   the highest epoch the caller has seen (floor of a bump)
-- ARGV[5]   announcement channel (in the `{cluster}` slot, like the keys)
-- ARGV[6]   the command that announces: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[7]   server time (ms) of this node's previous successful heartbeat; 0 for none
-- ARGV[8]   a gap since then of this many ms or more is a stall (heartbeat TTL - period)
-- ARGV[9..] ids of the members whose heartbeat keys are KEYS[5..]
-- Returns   see reply() in the prelude; added = 1 when this node was not registered,
--           stalled = 1 when this call found its own heartbeat expired while registered, or a
--           long gap since this node's previous heartbeat
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local previous_ms = tonumber(ARGV[7])
local long_gap = previous_ms > 0 and now_ms - previous_ms >= tonumber(ARGV[8])
local was_beating = redis.call('EXISTS', KEYS[3]) == 1
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
local added = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local stalled = 0
if (not was_beating and added == 0) or long_gap then
  stalled = 1
  redis.call('SET', KEYS[4], '1', 'PX', ARGV[3])
end
local removed = {}
if redis.call('EXISTS', KEYS[4]) == 0 then
  for i = 5, #KEYS do
    local id = ARGV[i + 4]
    if redis.call('EXISTS', KEYS[i]) == 0 and redis.call('HDEL', KEYS[1], id) == 1 then
      removed[#removed + 1] = id
    end
  end
end
local epoch
if added == 1 or #removed > 0 then
  epoch = bump_epoch(ARGV[4])
  redis.call(ARGV[6], ARGV[5], epoch)
else
  epoch = read_epoch()
end
return reply(epoch, added, removed, stalled)
