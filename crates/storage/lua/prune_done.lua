-- prune_done.lua: forgets completed tasks (executed-set entries and their records).
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: done       ZSET id -> completed_ms
-- ARGV[1]: older_than_ms (entries completed strictly before it go)
-- ARGV[2]: limit
-- Returns: how many were pruned.

return prune_completed(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]))
