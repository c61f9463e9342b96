-- register_queue.lua: records a queue's partition count once, and bumps the registry's
-- version counter when it did, in one step.
-- KEYS[1]: <prefix>:{cluster}:queues          HASH queue -> partition count
-- KEYS[2]: <prefix>:{cluster}:queues_version  STRING counter
-- ARGV[1]: queue, ARGV[2]: partition count
-- Returns: the recorded count (this one, or the one recorded before).
-- One script, so a call that ran but whose reply was lost has bumped the counter too: its
-- retry finds the entry and must not need to (two commands, HSETNX then INCR, left the
-- counter unmoved when the HSETNX ran late, after a timeout, and its retry found the entry:
-- other nodes then kept a registry without the queue for up to 30 s).
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  redis.call('INCR', KEYS[2])
end
return redis.call('HGET', KEYS[1], ARGV[1])
