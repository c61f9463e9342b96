-- record.lua: the task record codec, version 1. Not a script of its own: scripts.rs puts it
-- in front of the scripts that read or write records (each script gets only the parts it
-- uses: Redis runs a script's top level, function definitions included, on every call).
-- Its Rust twin is src/redis/record.rs; change both together.
--
-- A record is the value of field <id> in the partition's `tasks` hash:
--
--   1|<generation>|<attempt>|<claim>|<due>|<scheduled due>|<error length>|<error><payload>
--
-- all numbers in decimal ASCII, and a field left empty takes its default: attempt 1, claim 0,
-- error length 0, scheduled due = due, and due = the task's score in `due` (allowed only
-- while the task is pending: claim_due writes the due into the record). A fresh pending task
-- thus costs "1|<16-digit generation>||||||" = 24 bytes before its payload, which keeps a
-- record with a 50-byte payload inside jemalloc's 80-byte size class.
-- <due> is the due time of the current (or last) attempt; <scheduled due> is the due the
-- producer gave, the dedup key; <claim> is the fencing number of the latest claim. The first
-- field is the format version: a record whose version is not 1 is refused, never guessed at.
-- Generation 0 is never given to a schedule (a fresh record starts at Redis TIME in µs): it
-- marks a task cancelled while its handler ran (see cancel.lua). Its running attempt is the
-- last: ack and fail forget it, requeue_expired drops it, claim_due never claims it.

local RECORD_VERSION = '1'

-- The error reply for a record that cannot be decoded; Rust turns it into CorruptRecord.
local function corrupt(id, reason)
  return redis.error_reply('DELAYQ_CORRUPT ' .. reason .. ' | field ' .. id)
end

-- Decodes a record: a table {gen, attempt, claim, due, sched, err, err_at, payload_at} or
-- nil, reason. gen, attempt and claim are numbers; due and sched are the decimal strings as
-- stored ('' when implicit; see due_of and sched_of).
local function decode_record(raw)
  -- One match for the common case (every capture is a new string, so fewer is faster).
  local version, gen, attempt, claim, due, sched, errlen, err_at =
    string.match(raw, '^(%d+)|(%d+)|(%d*)|(%d*)|(%d*)|(%d*)|(%d*)|()')
  if version ~= RECORD_VERSION then
    version = version or string.match(raw, '^(%d+)|')
    if version == nil then
      return nil, 'not a delayq record (no version header)'
    elseif version ~= RECORD_VERSION then
      return nil, 'unknown record version ' .. version .. ' (this release reads version 1)'
    end
    return nil, 'malformed version 1 header'
  end
  errlen = tonumber(errlen) or 0
  if err_at + errlen - 1 > #raw then
    return nil, 'the error text runs past the end of the record'
  end
  return {
    gen = tonumber(gen),
    attempt = tonumber(attempt) or 1,
    claim = tonumber(claim) or 0,
    due = due,
    sched = sched,
    err = errlen == 0 and '' or string.sub(raw, err_at, err_at + errlen - 1),
    err_at = err_at,
    payload_at = err_at + errlen,
  }
end

-- The record's due, or `score` (the task's score in `due`) when the record leaves it implicit.
local function due_of(rec, score)
  if rec.due ~= '' then
    return rec.due
  end
  return score
end

-- The scheduled due (dedup key) as far as the record says: '' only for a pending record
-- whose due and scheduled due are both its score.
local function sched_of(rec)
  if rec.sched ~= '' then
    return rec.sched
  end
  return rec.due
end

-- Fast paths. The claim and ack paths run once per fired task, so they read only the header
-- fields they need with one anchored match, and splice instead of re-encoding (the payload is
-- never decoded). A record these patterns do not match is not a well-formed version 1 record:
-- the callers then ask decode_record for the reason.

-- For a claim: generation, attempt, claim and due (strings, '' where implicit), the position
-- of the scheduled due, the error length ('' = 0) and the position of the error text.
local CLAIM_FIELDS = '^1|(%d+)|(%d*)|(%d*)|(%d*)|()%d*|(%d*)|()'

-- For a lease check: generation and claim (strings), and the position after the claim field.
local LEASE_FIELDS = '^1|(%d+)|%d*|(%d*)|()'

-- From the position after the claim field: the error length ('' = 0) and the position of the
-- error text, which is where a completed task's record ends.
local TAIL_FIELDS = '^%d*|%d*|(%d*)|()'

-- For an ack: generation, claim ('' = 0), the error length ('' = 0) and the position of the
-- error text (LEASE_FIELDS and TAIL_FIELDS in one match).
local ACK_FIELDS = '^1|(%d+)|%d*|(%d*)|%d*|%d*|(%d*)|()'

-- Whether a raw record is marked cancelled-while-running (generation 0), without decoding it.
local function is_cancelled_raw(raw)
  return string.find(raw, '^%d+|0|') ~= nil
end

-- Encodes a record. due and sched are decimal strings ('' = implicit); counters are numbers.
local function encode_record(gen, attempt, claim, due, sched, err, payload)
  if sched == due then
    sched = ''
  end
  local len = string.len(err)
  return RECORD_VERSION .. '|' .. string.format('%d', gen)
    .. '|' .. (attempt == 1 and '' or string.format('%d', attempt))
    .. '|' .. (claim == 0 and '' or string.format('%d', claim))
    .. '|' .. due .. '|' .. sched .. '|' .. (len == 0 and '' or len) .. '|' .. err .. payload
end
