-- heartbeat: registers or refreshes this node, removes the members whose heartbeat expired,
-- and announces a change. At most one epoch bump per call, and only when the member set
-- changed; the checks and HDEL run atomically, so two nodes removing the same dead member at
-- the same time bump the epoch once between them. Also used to join.
--
-- What it costs does not depend on the number of members (guarantee 12): each node's
-- deadline lives in the `deadlines` ZSET (node id -> server time in ms at which its
-- heartbeat expires), and a heartbeat looks only at the low end of it, the deadlines already
-- past (at most ARGV[10] of them per call; more are removed by the next calls). The
-- registry is read (O(members)) only when the caller does not hold the resulting epoch
-- (ARGV[9]), after a stall, or when this node was added: an unchanged membership costs
-- O(1) commands and bytes.
--
-- Rolling upgrades: the previous release knows nothing of `deadlines`; it refreshes its
-- `hb:<id>` key and checks every member's `hb:<id>` key with EXISTS. So this script keeps
-- SETting this node's `hb:<id>` key (the previous release's nodes see it alive), and the
-- members registered without a deadline (the previous release's nodes, reported when the
-- registry is read) are checked by their `hb:<id>` key, KEYS[6..], as that release did.
-- Once no such member remains, KEYS[6..] is empty.
--
-- A stall is not a death. When this node's own deadline had passed although its entry is
-- still registered, nobody removed it while it was silent: Redis stood still for longer than
-- the TTL (DEBUG SLEEP, a fork, a slow fsync; every deadline passed at once), or this node
-- did (a GC pause, SIGSTOP) and came back before anyone noticed. Either way the others'
-- passed deadlines prove nothing yet: the script sets the stall marker for one TTL, and
-- while it is set no heartbeat removes anybody, so that every live node gets one full TTL to
-- beat again (their requests queued during a Redis stall may run in any order after it).
-- A failover is a stall too: nobody could write while the master changed (a Sentinel
-- promotion, a Cluster failover of the `{cluster}` slot), and the new master may miss the
-- last refreshes. So a long gap since this node's previous heartbeat (measured on the
-- server's TIME: ARGV[7], ARGV[8]) sets the marker as well, even when this node's own
-- deadline survived the gap: the others', refreshed up to one period earlier, may not have.
-- A node removed while it was away finds its entry gone instead: it re-registers (added = 1)
-- and sets no marker unless its gap was long. The marker's value is when the silence began;
-- members dead since well before it are still removed (see below), so late heartbeats that
-- set the marker again and again never keep a dead member in.
--
-- KEYS[1]   registry   HASH   node id -> JSON entry
-- KEYS[2]   epoch      STRING membership epoch
-- KEYS[3]   heartbeat  STRING this node's `hb:<id>` (expires after the TTL; for the
--                             previous release, which checks it)
-- KEYS[4]   stall      STRING set for one TTL after a stall was seen, to the server time (ms)
--                             the silence began: only members dead since before are removed
-- KEYS[5]   deadlines  ZSET   node id -> heartbeat deadline (ms, server time)
-- KEYS[6..] `hb:<id>` keys of the members without a deadline, in the order of ARGV[11..]
-- ARGV[1]   this node's id
-- ARGV[2]   this node's JSON entry (with its new last heartbeat)
-- ARGV[3]   heartbeat TTL in milliseconds
-- ARGV[4]   the highest epoch the caller has seen (floor of a bump)
-- ARGV[5]   announcement channel (in the `{cluster}` slot, like the keys)
-- ARGV[6]   the command that announces: PUBLISH, or SPUBLISH on a Redis Cluster
-- ARGV[7]   server time (ms) of this node's previous successful heartbeat; 0 for none
-- ARGV[8]   a gap since then of this many ms or more is a stall (heartbeat TTL - period)
-- ARGV[9]   the epoch the caller holds (empty for none): the registry is read if it differs
-- ARGV[10]  the most passed deadlines one call examines
-- ARGV[11..] ids of the members whose `hb:<id>` keys are KEYS[6..]
-- Returns   see reply() in the prelude; added = 1 when this node was not registered,
--           stalled = 1 when this call found its own deadline passed while registered, or a
--           long gap since this node's previous heartbeat
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local previous_ms = tonumber(ARGV[7])
local long_gap = previous_ms > 0 and now_ms - previous_ms >= tonumber(ARGV[8])
-- A heartbeat key with PX ttl still exists at exactly its expiry time: so does a deadline.
local own = redis.call('ZSCORE', KEYS[5], ARGV[1])
local was_beating = own and tonumber(own) >= now_ms
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
redis.call('ZADD', KEYS[5], now_ms + tonumber(ARGV[3]), ARGV[1])
local added = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local stalled = 0
local ttl_ms = tonumber(ARGV[3])
if (not was_beating and added == 0) or long_gap then
  stalled = 1
  -- The marker holds when this node's silence began (its previous heartbeat, or its last
  -- deadline minus the TTL): see the removal below.
  local silent_since = now_ms
  if previous_ms > 0 then
    silent_since = previous_ms
  elseif own then
    silent_since = tonumber(own) - ttl_ms
  end
  redis.call('SET', KEYS[4], string.format('%d', silent_since), 'PX', ARGV[3])
end
local removed = {}
-- While the marker is set, a member is removed only if its deadline passed more than one TTL
-- before the silence the marker names began: it was dead before anybody could have been kept
-- from beating (one TTL of slack for the last refreshes a failover may lose). Without the
-- marker, every passed deadline counts. So a node whose heartbeats are late again and again
-- (each one a long gap, each one setting the marker anew) delays the removal of a dead member
-- by about one TTL and one gap, never for as long as it stays late. A marker of the previous
-- release ('1') protects everybody, as that release did.
local legacy_checks = true
local remove_before = now_ms
local marker = redis.call('GET', KEYS[4])
if marker then
  legacy_checks = false
  remove_before = math.min(now_ms, (tonumber(marker) or 0) - ttl_ms)
end
do
  local passed = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. string.format('%d', remove_before), 'LIMIT', 0, tonumber(ARGV[10]))
  for _, id in ipairs(passed) do
    -- Gone from the registry already (removed by a node of the previous release, which does
    -- not know this ZSET): only the deadline is left to drop, no bump.
    redis.call('ZREM', KEYS[5], id)
    if redis.call('HDEL', KEYS[1], id) == 1 then
      removed[#removed + 1] = id
    end
  end
  for i = 6, #KEYS do
    local id = ARGV[i + 5]
    if legacy_checks and redis.call('EXISTS', KEYS[i]) == 0 and redis.call('HDEL', KEYS[1], id) == 1 then
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
local read = added == 1 or stalled == 1 or epoch ~= tonumber(ARGV[9])
return reply(epoch, added, removed, stalled, read, KEYS[5])
