-- schedule.lua: schedules one or more tasks of one or more partitions (a mode, with dedup).
-- For each partition k = 0, 1, ... (several share a call only on a single master):
-- KEYS[9k+1]: due        ZSET id -> due_ms of pending tasks
-- KEYS[9k+2]: tasks      HASH id -> record
-- KEYS[9k+3]: inflight   ZSET id -> lease deadline
-- KEYS[9k+4]: done       ZSET id -> completed_ms (executed-set)
-- KEYS[9k+5]: dead       ZSET id -> failed_ms
-- KEYS[9k+6]: ticks      ZSET tick id -> tick ms, the tick ledger (mode 'tick' only)
-- KEYS[9k+7]: traces     HASH id -> W3C traceparent the task was scheduled with (only the
--             traced ones: a partition that never saw one has no such key)
-- KEYS[9k+8], KEYS[9k+9]: flow, parked (flow.lua): a parked task is pending too; replacing
--             a pending task gives back a slot of its flow key it held while waiting and
--             takes it out of the parked set
-- ARGV[1]: mode, 'upsert', 'if_absent', 'earlier', 'later' or 'tick' (a recurring schedule's
--          tick: if-absent, and only if the ledger does not have the id yet; the id then
--          enters the ledger). For a pending id, 'earlier' / 'later' keep it unless the new
--          due is strictly earlier / later than its current due (the payload goes with the
--          winning due). For an id in flight, 'earlier' keeps it; 'later' re-arms (as
--          'upsert' does) only a due later than the running attempt's. A dead id is replaced
--          by every mode but 'if_absent'. Rust's twin: ScheduleMode in src/model.rs.
-- ARGV[2]: executed retention in ms (an (id, due) that completed less than this long ago, by
--          Redis TIME, is a duplicate; 0 turns dedup off)
-- then for each partition, in order: the count n of its items, then n times: id, due_ms,
-- payload, traceparent ('' for none). A created or replaced task's traceparent is set (or,
-- without one, an earlier generation's is dropped); a kept or duplicate one's is untouched.
-- Returns: one entry per item, in the order of the items: 'C' created | 'R<previous due>' replaced |
--   'K<due>' kept | 'D' duplicate | 'T' tick already in the ledger (nothing changed) |
--   'X<reason>' corrupt record (that item is left alone; the others proceed).
-- A new id starts at generation = Redis TIME in µs, so an id cancelled and scheduled again
-- never reuses a generation; each later schedule of a live or completed id adds 1.
-- An id in flight that is scheduled again gets a new record (generation + 1, attempt 1) and
-- goes back into `due`; its in-flight entry stays until the running handler acks (Superseded)
-- or its lease expires. The claim number carries over so the old token is still recognised.
-- Unless the new due is the running one's scheduled due: that resend of a fire in progress
-- is 'D' and changes nothing (no second run, no new generation), when dedup is on.
-- Speed: the ids of a partition are looked up with one HMGET and new ids (the bulk-load case)
-- are written with one HSET and one ZADD per partition; a partition's single new item takes
-- one HSETNX and one ZADD; only existing ids take the per-item path.

local mode = ARGV[1]
if mode ~= 'upsert' and mode ~= 'if_absent' and mode ~= 'earlier' and mode ~= 'later'
    and mode ~= 'tick' then
  return redis.error_reply('ERR schedule.lua: unknown mode ' .. tostring(mode))
end
local tick_mode = mode == 'tick'
local if_absent = mode == 'if_absent' or tick_mode
local earlier, later = mode == 'earlier', mode == 'later'
local retention = tonumber(ARGV[2])
-- Every new id of this call shares one generation (Redis TIME in µs): unique per id.
local fresh_header = encode_record(redis_now_us(), 1, 0, '', '', '', '')
local now_ms = nil

local out = {}
local nout = 0

local function schedule_partition(due_key, tasks_key, inflight_key, done_key, dead_key, ticks_key, traces_key, fc, base, count)
  -- Whether the partition holds or parks tasks of flow keys (asked once, on the per-item path).
  local flowing = nil
  -- Whether the partition holds traces (asked once, and only when a replaced task might
  -- leave one behind): an untraced partition costs no trace call.
  local traced = nil
  -- The task `id` now in its record is scheduled with `trace` ('' for none).
  local function set_trace(id, trace)
    if trace ~= '' then
      redis.call('HSET', traces_key, id, trace)
      traced = true
      return
    end
    if traced == nil then
      traced = redis.call('EXISTS', traces_key) == 1
    end
    if traced then
      redis.call('HDEL', traces_key, id)
    end
  end
  local found
  if count == 1 and not tick_mode then
    -- One item (most often a coalesced single schedule): HSETNX creates a new id's record
    -- and tells whether there was one, in one command. A new id has no trace to drop.
    local id = ARGV[base + 1]
    if redis.call('HSETNX', tasks_key, id, fresh_header .. ARGV[base + 3]) == 1 then
      redis.call('ZADD', due_key, ARGV[base + 2], id)
      if ARGV[base + 4] ~= '' then
        redis.call('HSET', traces_key, id, ARGV[base + 4])
      end
      nout = nout + 1
      out[nout] = 'C'
      return
    end
    found = { redis.call('HGET', tasks_key, id) }
  else
    local lookup = {}
    for i = 1, count do
      lookup[i] = ARGV[base + 4 * i - 3]
    end
    found = read_in_chunks('HMGET', tasks_key, lookup)
  end

  local new_records, new_dues, new_traces = {}, {}, {}
  local function write_new()
    if #new_records > 0 then
      call_in_chunks('HSET', tasks_key, new_records)
      call_in_chunks('ZADD', due_key, new_dues)
      new_records, new_dues = {}, {}
    end
    if #new_traces > 0 then
      call_in_chunks('HSET', traces_key, new_traces)
      new_traces = {}
      traced = true
    end
  end

  -- The per-item path for an id that has a record: replace, keep, dedup or re-arm.
  local function schedule_existing(id, due, payload, trace, raw)
    local rec, reason = decode_record(raw)
    if not rec then
      return 'X' .. reason
    end
    if rec.gen == 0 then
      -- Cancelled while its handler runs: gone as far as producers are concerned, so this is
      -- a new life (fresh generation); the running attempt's ack will find it superseded.
      redis.call('HSET', tasks_key, id, encode_record(redis_now_us(), 1, rec.claim, '', '', '', payload))
      redis.call('ZADD', due_key, due, id)
      set_trace(id, trace)
      return 'C'
    end
    local pending = redis.call('ZSCORE', due_key, id)
    if flowing == nil then
      flowing = redis.call('EXISTS', fc.flow) == 1
    end
    if not pending and flowing then
      pending = flow_parked_at(fc, id)
    end
    local live = pending or redis.call('ZSCORE', inflight_key, id)
    local dead = false
    if not live then
      dead = redis.call('ZSCORE', dead_key, id)
      live = dead
    end
    -- The scheduled due (the dedup key). A pending record leaves it implicit when it equals
    -- the due score, as after a retry due at the very scheduled due.
    local sched = sched_of(rec)
    if sched == '' and pending then
      sched = pending
    end
    local same_due = sched ~= '' and tonumber(sched) == tonumber(due)
    local verdict
    if live then
      if if_absent then
        return 'K' .. (pending or rec.due)
      end
      if not pending and not dead and retention > 0 and same_due then
        -- In flight for this very due: a resend of the fire that is running (guarantee 6).
        return 'D'
      end
      if retention > 0 and same_due and (dead or (pending and rec.attempt > 1)) then
        -- Waiting for a retry, or dead, for this very due: that fire happened; a resend must
        -- not reset the attempts, the backoff or the generation (guarantee 6).
        return 'D'
      end
      if pending then
        -- earlier / later: the live due wins unless the new one is strictly earlier / later.
        local live_due, new_due = tonumber(pending), tonumber(due)
        if (earlier and new_due >= live_due) or (later and new_due <= live_due) then
          return 'K' .. pending
        end
      elseif not dead then
        -- In flight: earlier keeps the running attempt; later re-arms only a later due.
        if earlier or (later and tonumber(due) <= tonumber(rec.due)) then
          return 'K' .. rec.due
        end
      end
      verdict = 'R' .. (pending or rec.due)
      if dead then
        redis.call('ZREM', dead_key, id)
      end
      if pending and flowing then
        -- A new task: out of the parked set, and its old self's slot (a FIFO retry) ends.
        flow_remove(fc, id)
        flow_release_waiting(fc, id)
      end
    else
      verdict = 'C'
      local done = redis.call('ZSCORE', done_key, id)
      if done then
        now_ms = now_ms or redis_now_ms()
        if retention > 0 and sched_of(rec) == due and now_ms - tonumber(done) < retention then
          return 'D'
        end
        redis.call('ZREM', done_key, id)
      end
    end
    redis.call('HSET', tasks_key, id, encode_record(rec.gen + 1, 1, rec.claim, '', '', '', payload))
    redis.call('ZADD', due_key, due, id)
    set_trace(id, trace)
    return verdict
  end

  local seen = {}
  for k = 1, count do
    local at = base + 4 * k
    local id, due, payload, trace = ARGV[at - 3], ARGV[at - 2], ARGV[at - 1], ARGV[at]
    local raw = found[k]
    if seen[id] then
      -- The same id earlier in this call: the lookup is out of date.
      write_new()
      raw = redis.call('HGET', tasks_key, id)
    end
    seen[id] = true
    if tick_mode and redis.call('ZSCORE', ticks_key, id) then
      -- Created before (whatever became of its task since): repeating a tick is a no-op.
      out[nout + k] = 'T'
    elseif raw then
      if tick_mode then
        redis.call('ZADD', ticks_key, due, id)
      end
      out[nout + k] = schedule_existing(id, due, payload, trace, raw)
    else
      if tick_mode then
        redis.call('ZADD', ticks_key, due, id)
      end
      new_records[#new_records + 1] = id
      new_records[#new_records + 1] = fresh_header .. payload
      new_dues[#new_dues + 1] = due
      new_dues[#new_dues + 1] = id
      if trace ~= '' then
        new_traces[#new_traces + 1] = id
        new_traces[#new_traces + 1] = trace
      end
      out[nout + k] = 'C'
    end
  end
  write_new()
  nout = nout + count
end

local base = 3
for k = 0, #KEYS / 9 - 1 do
  local count = tonumber(ARGV[base])
  local fc = { due = KEYS[9 * k + 1], flow = KEYS[9 * k + 8], parked = KEYS[9 * k + 9] }
  schedule_partition(KEYS[9 * k + 1], KEYS[9 * k + 2], KEYS[9 * k + 3], KEYS[9 * k + 4],
    KEYS[9 * k + 5], KEYS[9 * k + 6], KEYS[9 * k + 7], fc, base, count)
  base = base + 1 + 4 * count
end
return out
