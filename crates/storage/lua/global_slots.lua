-- global_slots.lua: the cluster-wide handler slots of a queue (global_concurrency).
-- KEYS[1]: holders  HASH node -> slots held
-- KEYS[2]: leases   ZSET node -> lease deadline ms (Redis TIME)
-- ARGV[1]: node, ARGV[2]: 'acquire' or 'release'
-- acquire: ARGV[3] limit, ARGV[4] wanted, ARGV[5] lease length in ms. Holders whose lease ran
--   out (a dead node) are dropped first; then up to `wanted` slots are granted so that all
--   holders hold at most `limit`, and the node's lease is renewed (also when it was granted
--   nothing but holds some). Returns the slots granted.
-- release: ARGV[3] count. Gives back that many of the node's slots. Returns what it holds now.
local holders_key, leases_key = KEYS[1], KEYS[2]
local node, op = ARGV[1], ARGV[2]
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
if op == 'release' then
  local left = redis.call('HINCRBY', holders_key, node, -tonumber(ARGV[3]))
  if left <= 0 then
    redis.call('HDEL', holders_key, node)
    redis.call('ZREM', leases_key, node)
    return 0
  end
  return left
end
local expired = redis.call('ZRANGEBYSCORE', leases_key, '-inf', string.format('%d', now_ms))
for _, dead in ipairs(expired) do
  redis.call('HDEL', holders_key, dead)
  redis.call('ZREM', leases_key, dead)
end
local held = 0
local values = redis.call('HVALS', holders_key)
for _, value in ipairs(values) do
  held = held + tonumber(value)
end
local grant = math.min(tonumber(ARGV[4]), tonumber(ARGV[3]) - held)
if grant < 0 then
  grant = 0
end
if grant > 0 then
  redis.call('HINCRBY', holders_key, node, grant)
end
if grant > 0 or redis.call('HEXISTS', holders_key, node) == 1 then
  redis.call('ZADD', leases_key, now_ms + tonumber(ARGV[5]), node)
end
return grant
