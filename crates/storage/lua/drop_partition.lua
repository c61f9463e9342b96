-- drop_partition.lua: deletes every key of one partition (`delayq queue delete`).
-- KEYS[1]: due        ZSET id -> due_ms
-- KEYS[2]: inflight   ZSET id -> lease deadline
-- KEYS[3]: dead       ZSET id -> failed_ms
-- KEYS[4]: parked     ZSET of tasks held back by their flow key (flow.lua)
-- KEYS[5..]: the partition's other keys (tasks, done, claim, ticks, paused, flow, and any
--          other key with the partition's tag that a SCAN found); all share one slot
-- Returns: the tasks removed, pending (parked ones too) + in flight + dead (counted in the same script that
-- deletes them, so a schedule or a claim cannot slip between the count and the delete).

local removed = redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3])
  + redis.call('ZCARD', KEYS[4])
for _, key in ipairs(KEYS) do
  redis.call('UNLINK', key)
end
return removed
