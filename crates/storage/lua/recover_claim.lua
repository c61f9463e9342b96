-- recover_claim.lua: the tasks of a claim whose reply was lost, from its receipt.
-- KEYS[1]: tasks      HASH id -> record
-- KEYS[2]: inflight   ZSET id -> lease deadline
-- KEYS[3]: receipt    STRING written by claim_due.lua: '2' NUL owner NUL lease deadline NUL id1
--          NUL claim1 NUL ..., or, written by an earlier release, cjson [owner, lease
--          deadline, [id, claim, ...]]
-- KEYS[4]: traces     HASH id -> traceparent (see schedule.lua)
-- ARGV[1]: owner of the lost claim
-- ARGV[2]: its lease deadline in ms, as it was sent
-- Returns: { traces, id1, record1, id2, record2, ... }: `traces` as claim_due.lua's (false, or
-- each task's traceparent or false); then the receipt's tasks that are still in flight
-- under that very claim (the record's claim number is the receipt's), as claim_due returned
-- them. Empty when the receipt is gone (expired, or the claim never ran) or is another
-- claim's (owner or deadline differ): a later claim of the partition replaced it. Reads only.

local tasks_key, inflight_key, receipt_key, traces_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local out = { false }
local stored = redis.call('GET', receipt_key)
if not stored then
  return out
end
local owner, lease, items
if string.sub(stored, 1, 2) == '2\0' then
  local fields, start = {}, 3
  while true do
    local stop = string.find(stored, '\0', start, true)
    if not stop then
      fields[#fields + 1] = string.sub(stored, start)
      break
    end
    fields[#fields + 1] = string.sub(stored, start, stop - 1)
    start = stop + 1
  end
  owner, lease, items = fields[1], fields[2], {}
  for i = 3, #fields do
    items[#items + 1] = fields[i]
  end
else
  local ok, receipt = pcall(cjson.decode, stored)
  if not ok or type(receipt) ~= 'table' or type(receipt[3]) ~= 'table' then
    return out
  end
  owner, lease, items = receipt[1], receipt[2], receipt[3]
end
if owner ~= ARGV[1] or lease ~= ARGV[2] then
  return out
end
for i = 1, #items - 1, 2 do
  local id, claim = items[i], tonumber(items[i + 1])
  local raw = redis.call('HGET', tasks_key, id)
  if raw and redis.call('ZSCORE', inflight_key, id) then
    local rec = decode_record(raw)
    if rec and rec.gen ~= 0 and rec.claim == claim then
      out[#out + 1] = id
      out[#out + 1] = raw
    end
  end
end
if #out > 1 and redis.call('EXISTS', traces_key) == 1 then
  local traces = {}
  for i = 2, #out, 2 do
    traces[#traces + 1] = redis.call('HGET', traces_key, out[i])
  end
  out[1] = traces
end
return out
