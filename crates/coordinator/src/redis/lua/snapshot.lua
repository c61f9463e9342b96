-- snapshot: reads the epoch, and the registry when the caller does not hold that epoch yet
-- (and the server's time); writes nothing.
--
-- KEYS[1] registry   HASH   node id -> JSON entry
-- KEYS[2] epoch      STRING membership epoch
-- KEYS[3] deadlines  ZSET   node id -> heartbeat deadline (ms, server time)
-- ARGV[1] the epoch the caller holds; absent or empty: read the registry whatever the epoch
-- Returns see reply() in the prelude
local epoch = read_epoch()
return reply(epoch, 0, {}, 0, epoch ~= tonumber(ARGV[1] or ''), KEYS[3])
