-- heartbeat: registers or refreshes this node, removes the members whose heartbeat expired,
-- and announces a change. At most one epoch bump per call, and only when the member set
-- changed; EXISTS and HDEL run atomically, so two nodes removing the same dead member at the
-- same time bump the epoch once between them. Also used to join (with no members to check).
--
-- KEYS[1]   registry   HASH   node id -> JSON entry
-- KEYS[2]   epoch      STRING membership epoch
-- KEYS[3]   heartbeat  STRING this node's heartbeat (expires after the TTL)
-- KEYS[4..] heartbeat keys of other members to check, in the order of ARGV[6..]
-- ARGV[1]   this node's id
-- ARGV[2]   this node's JSON entry (with its new last heartbeat)
-- ARGV[3]   heartbeat TTL in milliseconds
-- ARGV[4]   the highest epoch the caller has seen (floor of a bump)
-- ARGV[5]   announcement channel (not a key: PUBLISH is cluster-wide)
-- ARGV[6..] ids of the members whose heartbeat keys are KEYS[4..]
-- Returns   see reply() in the prelude; added = 1 when this node was not registered
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
local added = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local removed = {}
for i = 4, #KEYS do
  local id = ARGV[i + 2]
  if redis.call('EXISTS', KEYS[i]) == 0 and redis.call('HDEL', KEYS[1], id) == 1 then
    removed[#removed + 1] = id
  end
end
local epoch
if added == 1 or #removed > 0 then
  epoch = bump_epoch(ARGV[4])
  redis.call('PUBLISH', ARGV[5], epoch)
else
  epoch = read_epoch()
end
return reply(epoch, added, removed)
