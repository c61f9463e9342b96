-- util.lua: clock and bulk-call helpers shared by the scripts (put in front of those that
-- use them).

-- Redis TIME (the cluster clock) in milliseconds.
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Redis TIME in microseconds: about 1.7e15, exact in Lua's doubles (< 2^53) until 2255.
local function redis_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Runs `command key args...` in slices: Lua's unpack() cannot spread more than a few
-- thousand values. The slice length is even, so (score, member) pairs stay together.
local function call_in_chunks(command, key, args)
  local n = #args
  for first = 1, n, 4000 do
    redis.call(command, key, unpack(args, first, math.min(first + 3999, n)))
  end
end

-- A multi-field read (HMGET, ZMSCORE) of any number of fields: the values in order, false
-- where there is none.
local function read_in_chunks(command, key, fields)
  local values = {}
  for first = 1, #fields, 4000 do
    local part = redis.call(command, key, unpack(fields, first, math.min(first + 3999, #fields)))
    for i = 1, #part do
      values[#values + 1] = part[i]
    end
  end
  return values
end
