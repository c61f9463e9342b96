-- leave: removes this node at once (graceful shutdown) and announces the change.
--
-- KEYS[1] registry   HASH   node id -> JSON entry
-- KEYS[2] epoch      STRING membership epoch
-- KEYS[3] heartbeat  STRING this node's heartbeat
-- KEYS[4] deadlines  ZSET   node id -> heartbeat deadline (ms, server time)
-- ARGV[1] this node's id
-- ARGV[2] the highest epoch the caller has seen (floor of a bump)
-- ARGV[3] announcement channel
-- ARGV[4] the command that announces: PUBLISH, or SPUBLISH on a Redis Cluster
-- Returns see reply() in the prelude (registry read); removed = {id} when the node was
--         registered
redis.call('DEL', KEYS[3])
redis.call('ZREM', KEYS[4], ARGV[1])
local epoch
local removed = {}
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then
  removed[1] = ARGV[1]
  epoch = bump_epoch(ARGV[2])
  redis.call(ARGV[4], ARGV[3], epoch)
else
  epoch = read_epoch()
end
return reply(epoch, 0, removed, 0, true, KEYS[4])
