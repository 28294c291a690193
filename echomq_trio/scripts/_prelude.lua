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
--   STEP_LEAST_MS   the least step of the server clock that is noticed (2 s)
--   clock_step(meta)  the last step of the server clock recorded on a queue's meta key: its size
--                   (ms, the new clock less the old) and when it was recorded (server ms, on
--                   the new clock), or nil
--   witness(meta, now, seen, elapsed, spread)
--                   a caller's evidence of the server clock: it read `seen` (server ms; '' for
--                   none) on a call that took `spread` ms, and at least `elapsed` ms have passed
--                   since that call answered (its monotonic clock). A step of at least
--                   STEP_LEAST_MS since then is recorded on meta (clock_step_ms, clock_step_at,
--                   clock_fix = 'todo' for the bus's metronomes, and clock_total: the sum of
--                   every step recorded), unless it is recorded already. Returns the step it
--                   recorded (ms), or 0
--   steady_ms(meta, base, now)
--                   a clock the steps recorded on meta do not move, for an application's own
--                   windows and waits (its times are compared with each other, never shown):
--                   `now` (the server clock) less every step recorded since the hash `base`
--                   (in the queue's slot: it keeps the clock_total of its first use) was first
--                   used; record a step a caller witnesses first (witness), so nothing is
--                   written on a stepped clock before it is taken in
local KEY = {
  pending = 'pending',            -- zset pending
  schedule = 'schedule',          -- zset schedule
  active = 'active',              -- zset active
  dead = 'dead',                  -- zset dead
  expiries = 'expiries',          -- zset expiries
  cancelled = 'cancelled',        -- zset cancelled
  parents = 'parents',            -- zset parents
  job = 'job:',                   -- hash job:<id>
  flow = 'flow:',                 -- hash flow:<id>
  idempotency = 'key:',           -- string key:<key>
  debounce = 'debounce:',         -- string debounce:<key>
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
  cancel_marks = 'cancels',       -- zset cancels
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

local STEP_LEAST_MS = 2000

local function clock_step(meta)
  local m = redis.call('HMGET', meta, 'clock_step_ms', 'clock_step_at')
  if not m[1] then return nil end
  return tonumber(m[1]), tonumber(m[2])
end

local function witness(meta, now, seen, elapsed, spread)
  seen = tonumber(seen)
  if not seen then return 0 end
  elapsed, spread = tonumber(elapsed), tonumber(spread)
  -- Without a step, now lies between seen + elapsed and that plus the calls' own time (the
  -- spread of the reading, and this call's way here: at most STEP_LEAST_MS is assumed).
  local skew = now - (seen + elapsed)
  if skew > -STEP_LEAST_MS and skew < spread + STEP_LEAST_MS then return 0 end
  local step, at = clock_step(meta)
  if step and now - at <= elapsed + spread + STEP_LEAST_MS
    and math.abs(skew - step) < STEP_LEAST_MS + spread then
    return 0  -- recorded since the reading (by another witness of the same step)
  end
  redis.call('HSET', meta, 'clock_step_ms', skew, 'clock_step_at', now, 'clock_fix', 'todo')
  redis.call('HINCRBY', meta, 'clock_total', skew)
  return skew
end

local function steady_ms(meta, base, now)
  local total = tonumber(redis.call('HGET', meta, 'clock_total')) or 0
  local start = redis.call('HGET', base, 'start_total')
  if not start then
    redis.call('HSET', base, 'start_total', total)
    return now
  end
  return now - (total - tonumber(start))
end
