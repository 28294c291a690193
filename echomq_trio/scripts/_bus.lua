-- The bus's own helpers, after the public prelude, for the bus's scripts only (an application's
-- scripts do not get them). Not a transition itself. Every bus script opens with
-- `local qp = ARGV[1]` (the queue prefix `emq:{q}:`) and spells every key as qp and a KEY entry,
-- so every key it touches shares the `{q}` hash tag: one slot. The job states and the
-- transitions between them are the table in scripts/README.md.
--   wake(qp, n)                push up to n (<= 64) wake tokens for parked consumers
--   tick(qp)                   nudge a sleeping metronome (an earlier due time exists)
--   emit(qp, event, id, ...)   append to the queue's events stream, capped at its events_maxlen,
--                              unless the queue keeps no events (meta, see retention.lua)
--   trim_dead(qp, now)         drop at most 16 of the oldest dead jobs over the queue's dead_max
--                              or older than its dead_max_age_ms
--   held(qp, id, token, or_pending)
--                              the row of a job whose lease `token` holds (state active, or with
--                              or_pending also pending: reaped, not claimed again) as a table
--                              {state, lease, attempts, group}; else nil and 'gone' (no row) or
--                              'stale' (another lease, or not held)
--   to_waiting(qp, id, g, now, at, ...)
--                              put a job where it waits, its state to match: until `at` on the
--                              schedule ('scheduled'); else in its lane g, or the flat pending
--                              set ('pending')
--   lane_hold(qp, g, id, now, at)
--                              a strict lane keeps its head and waits until `at`
--   lane_ready(qp, g, now)     is lane g serviceable: non-empty, not paused, not waiting, below
--                              its limit
--   ring_add(qp, g, now)       put a serviceable lane on the ring once, and wake a consumer
--   lane_push(qp, g, id, now)  put a job into its lane (at its id's place: mint order), count it
--                              in metrics.lane_pending and list the lane in the lane index
--   lane_forget(qp, g)         take a lane with nothing left (no waiting jobs, none in flight, no
--                              pause, no wait) out of the lane index (whoever empties a lane
--                              takes it out of the lane groups: claim, ack)
--   lane_done(qp, g, now)      one fewer job of lane g in flight; re-ring it if it can go on
--   lane_wait(qp, g, until_ms) hold lane g until a time; a wait only ever extends
--   created(qp, now)           note the queue's creation once (meta.created_ms); a queue created
--                              so has its lane counter exact from the start (meta.counted)
--   schedule_at(qp, id, at)    put a job on the schedule (and tell the metronome if it is first)
--   next_run(at, every, now)   a repeat's next run: the first at + n*every after now
--   audit(qp, id, outcome, attempts, now, note, err)
--                              when the queue keeps an audit (meta.audit = 1), append the settled
--                              job's record to the audit stream in the same step that settles it
local EVENTS_MAXLEN = 10000

local function wake(qp, n)
  if n < 1 then return end
  if n > 64 then n = 64 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('LPUSH', qp .. KEY.wake, unpack(tokens)) > 64 then
    redis.call('LTRIM', qp .. KEY.wake, 0, 63)
  end
end

local function tick(qp)
  redis.call('LPUSH', qp .. KEY.tick, '1')
  redis.call('LTRIM', qp .. KEY.tick, 0, 0)
end

-- The queue's retention (meta: events, events_maxlen, dead_max, dead_max_age_ms), read once per
-- script run: nil until the first helper that needs it.
local kept = nil

local function retention(qp)
  if kept == nil then
    local m = redis.call('HMGET', qp .. KEY.meta, 'events', 'events_maxlen', 'dead_max',
      'dead_max_age_ms', 'created_ms')
    kept = {events = m[1] ~= '0', maxlen = tonumber(m[2]) or EVENTS_MAXLEN,
      dead_max = tonumber(m[3]), dead_age = tonumber(m[4]), created = m[5]}
  end
  return kept
end

local function emit(qp, event, id, ...)
  local r = retention(qp)
  if not r.events then return end
  redis.call('XADD', qp .. KEY.events, 'MAXLEN', '~', r.maxlen, '*', 'e', event, 'id', id, ...)
end

-- Keep the dead set within the queue's bounds: at most DEAD_TRIM_STEP of the oldest dead jobs
-- (rows and all) go per call, over the count bound or older than the age bound, so a call stays
-- O(log n) and the set converges as jobs keep dying.
local DEAD_TRIM_STEP = 16
local function trim_dead(qp, now)
  local r = retention(qp)
  local dead = qp .. KEY.dead
  local gone = {}
  if r.dead_max then
    local over = redis.call('ZCARD', dead) - r.dead_max
    if over > 0 then
      local popped = redis.call('ZPOPMIN', dead, math.min(over, DEAD_TRIM_STEP))
      for i = 1, #popped, 2 do gone[#gone + 1] = popped[i] end
    end
  end
  if r.dead_age and #gone < DEAD_TRIM_STEP then
    local old = redis.call('ZRANGEBYSCORE', dead, '-inf', now - r.dead_age, 'LIMIT', 0,
      DEAD_TRIM_STEP - #gone)
    if #old > 0 then redis.call('ZREM', dead, unpack(old)) end
    for _, id in ipairs(old) do gone[#gone + 1] = id end
  end
  for _, id in ipairs(gone) do redis.call('DEL', qp .. KEY.job .. id) end
  return #gone
end

local function held(qp, id, token, or_pending)
  -- On the hot path (ack, extend): one HMGET, its fields named here and nowhere else.
  local f = redis.call('HMGET', qp .. KEY.job .. id, 'state', 'lease', 'attempts', 'group')
  if not f[1] then return nil, 'gone' end
  local holds = f[1] == 'active' or (or_pending and f[1] == 'pending')
  if f[2] ~= token or not holds then return nil, 'stale' end
  return {state = f[1], lease = f[2], attempts = f[3], group = f[4] or nil}
end

local function lane_ready(qp, g, now)
  if redis.call('ZCARD', qp .. KEY.lane .. g) == 0 then return false end
  if redis.call('SISMEMBER', qp .. KEY.paused, g) == 1 then return false end
  local until_ms = redis.call('ZSCORE', qp .. KEY.lane_waits, g)
  if until_ms and tonumber(until_ms) > now then return false end
  local limit = redis.call('HGET', qp .. KEY.lane_limits, g)
  if limit then
    local in_flight = tonumber(redis.call('HGET', qp .. KEY.lane_in_flight, g) or '0')
    if in_flight >= tonumber(limit) then return false end
  end
  return true
end

local function ring_add(qp, g, now)
  if lane_ready(qp, g, now) and redis.call('SADD', qp .. KEY.on_ring, g) == 1 then
    redis.call('RPUSH', qp .. KEY.ring, g)
    wake(qp, 1)
  end
end

local function lane_push(qp, g, id, now)
  local lane = qp .. KEY.lane .. g
  if redis.call('ZADD', lane, 0, id) == 1 then
    redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', 1)
    -- A lane that held jobs already is in the lane groups and the index: only its first job
    -- lists it, so a batch into one lane writes them once.
    if redis.call('ZCARD', lane) == 1 then
      redis.call('SADD', qp .. KEY.lane_groups, g)
      redis.call('ZADD', qp .. KEY.lane_index, 0, g)
    end
  end
  ring_add(qp, g, now)
end

local function lane_forget(qp, g)
  if redis.call('ZCARD', qp .. KEY.lane .. g) > 0 then return end
  if redis.call('HEXISTS', qp .. KEY.lane_in_flight, g) == 1
    or redis.call('SISMEMBER', qp .. KEY.paused, g) == 1
    or redis.call('ZSCORE', qp .. KEY.lane_waits, g) then
    return
  end
  redis.call('ZREM', qp .. KEY.lane_index, g)
end

local function lane_done(qp, g, now)
  if redis.call('HINCRBY', qp .. KEY.lane_in_flight, g, -1) <= 0 then
    redis.call('HDEL', qp .. KEY.lane_in_flight, g)
    lane_forget(qp, g)
  end
  ring_add(qp, g, now)
end

local function lane_wait(qp, g, until_ms)
  redis.call('ZADD', qp .. KEY.lane_index, 0, g)
  -- Tell the metronome when this is now the earliest wait.
  local cur = redis.call('ZSCORE', qp .. KEY.lane_waits, g)
  if cur and tonumber(cur) >= until_ms then return end
  redis.call('ZADD', qp .. KEY.lane_waits, until_ms, g)
  local head = redis.call('ZRANGE', qp .. KEY.lane_waits, 0, 0)
  if head[1] == g then tick(qp) end
end

local function created(qp, now)
  local r = retention(qp)  -- the same read as the retention's: one command when it exists
  if r.created then return end
  if redis.call('HSETNX', qp .. KEY.meta, 'created_ms', now) == 1 then
    redis.call('HSET', qp .. KEY.meta, 'counted', 1)
  end
  r.created = now
end

local function schedule_at(qp, id, at)
  redis.call('ZADD', qp .. KEY.schedule, at, id)
  local head = redis.call('ZRANGE', qp .. KEY.schedule, 0, 0)
  if head[1] == id then tick(qp) end
end

-- Any further field/value pairs (...) go into the job's row in the same write; a lane job's row
-- names its group. Returns 1 when the job joined the flat pending set (the caller wakes that
-- many consumers once, at its end), else 0.
local function to_waiting(qp, id, g, now, at, ...)
  local state = 'pending'
  if at then state = 'scheduled' end
  if g then
    redis.call('HSET', qp .. KEY.job .. id, 'state', state, 'group', g, ...)
  else
    redis.call('HSET', qp .. KEY.job .. id, 'state', state, ...)
  end
  if at then
    schedule_at(qp, id, at)
    return 0
  end
  if g then
    lane_push(qp, g, id, now)
    return 0
  end
  redis.call('ZADD', qp .. KEY.pending, 0, id)
  return 1
end

-- The job goes back to the head of its lane (its id's place) and the whole lane waits until
-- `at`, so nothing behind it overtakes it; other lanes go on. The caller frees its lane slot.
local function lane_hold(qp, g, id, now, at)
  if at > now then lane_wait(qp, g, at) end
  to_waiting(qp, id, g, now)
end

-- Anchored to the schedule: lateness does not drift it, and runs missed while nothing ran
-- collapse into one. Always after `at`.
local function next_run(at, every, now)
  local nxt = at + every * (math.floor((now - at) / every) + 1)
  if nxt <= at then nxt = at + every end
  return nxt
end

local audit_on = nil  -- the queue's audit flag, read once per script run

local function audit(qp, id, outcome, attempts, now, note, err)
  if audit_on == nil then audit_on = redis.call('HGET', qp .. KEY.meta, 'audit') == '1' end
  if not audit_on then return end
  -- Never trimmed by a cap: its reader trims below what it has stored (audit_ack).
  redis.call('XADD', qp .. KEY.audit, '*', 'id', id, 'outcome', outcome, 'attempts', attempts,
    'settled_ms', now, 'payload', redis.call('HGET', qp .. KEY.job .. id, 'payload') or '',
    'note', note or '', 'error', err or '')
end
