-- snapshot: reads the epoch and the registry together (and the server's time), writes nothing.
--
-- KEYS[1] registry  HASH   node id -> JSON entry
-- KEYS[2] epoch     STRING membership epoch
-- Returns see reply() in the prelude
return reply(read_epoch(), 0, {})
