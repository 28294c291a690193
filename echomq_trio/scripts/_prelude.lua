-- The public prelude, prepended to every script (the bus's and an application's; an application's
-- scripts get this alone). Not a transition itself.
--   KEY             the keys of a queue: the mirror of echomq_trio/keys.py SCHEMA, line for line
--                   (name = 'fixed part', -- type pattern). A key of queue q is its prefix
--                   `emq:{q}:` (qp) and a KEY entry: `qp .. KEY.pending`; a key with a variable
--                   part is the entry and that part: `qp .. KEY.job .. id`. KEY.<name> is folded
--                   into the code as the literal suffix when a script is loaded
--                   (echomq_trio/lua.py), so it costs nothing per call, and a name KEY does not
--                   declare fails the load; KEY is not a table at run time.
--   fields(key, ...)  the named fields of a hash, as a table by name (a missing field is nil)
--   now_ms()        the server clock, Unix ms
--   ID_EPOCH_MS     the epoch of branded ids (2024-01-01 UTC), echomq_trio.ids.EPOCH_MS
local KEY = {
  pending = 'pending',            -- zset pending
  schedule = 'schedule',          -- zset schedule
  active = 'active',              -- zset active
  dead = 'dead',                  -- zset dead
  job = 'job:',                   -- hash job:<id>
  idempotency = 'key:',           -- string key:<key>
  seq = 'seq:',                   -- set seq:<scope>
  lane = 'g:',                    -- zset g:<group>
  lane_groups = 'groups',         -- set groups
  old_lane_index = 'lanes',       -- zset lanes
  lane_index = 'gactive',         -- hash gactive
  ring = 'ring',                  -- list ring
  on_ring = 'inring',             -- set inring
  paused = 'paused',              -- set paused
  lane_waits = 'gwait',           -- zset gwait
  lane_limits = 'glimit',         -- hash glimit
  lane_weights = 'gweight',       -- hash gweight
  repeats = 'repeat',             -- zset repeat
  registration = 'repeat:',       -- hash repeat:<name>
  wake = 'wake',                  -- list wake
  tick = 'tick',                  -- list tick
  events = 'events',              -- stream events
  audit = 'audit',                -- stream audit
  meta = 'meta',                  -- hash meta
  metrics = 'metrics',            -- hash metrics
  app = 'app:',                   -- any app:<name>
}

local ID_EPOCH_MS = 1704067200000

local function fields(key, ...)
  local names = {...}
  local values = redis.call('HMGET', key, ...)
  local out = {}
  for i = 1, #names do
    if values[i] then out[names[i]] = values[i] end
  end
  return out
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
