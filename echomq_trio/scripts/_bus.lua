-- The bus's own helpers, after the public prelude, for the bus's scripts only (an application's
-- scripts do not get them). Not a transition itself. Every bus script opens with
-- `local qp = ARGV[1]` (the queue prefix `emq:{q}:`) and spells every key as qp and a KEY entry,
-- so every key it touches shares the `{q}` hash tag: one slot. The job states and the
-- transitions between them are the table in scripts/README.md.
--   wake(qp, n)                push up to n (<= 64) wake tokens for parked consumers (the list
--                              is cut back to WAKE_KEEP tokens once it holds over twice that:
--                              one LTRIM per WAKE_KEEP pushes while no consumer drains it)
--   tick(qp)                   nudge a sleeping metronome (an earlier due time exists)
--   cap_freed(qp, freed)       freed jobs left active: wake consumers a queue's cap on jobs in
--                              flight held back (meta.max_active; no command without one)
--   emit(qp, event, id, ...)   append to the queue's events stream, capped at its events_maxlen,
--                              unless the queue keeps no events (meta, see retention.lua)
--   finished(qp, id, state)    publish a job's end ('completed', 'dead', 'cancelled') on its
--                              channel (named as its row) for jobs.result, when the queue keeps
--                              results
--   trim_dead(qp, now, set)    drop at most 16 of the oldest dead jobs over the queue's dead_max
--                              or older than its dead_max_age_ms (of `set`, a full key, when
--                              given: the cancelled set keeps the same bounds)
--   held(qp, id, token, or_pending)
--                              the row of a job whose lease `token` holds (state active, or with
--                              or_pending also pending: reaped, not claimed again) as a table
--                              {state, lease, attempts, group, priority (a job's with one),
--                              parent (a flow's job's: its parent, '' for its root)}; else nil
--                              and 'gone' (no row) or 'stale' (another lease, or not held)
--   flow_end(qp, id, ref, how, value, now)
--                              a flow's job ended; `ref`, its row's parent (its prefix and id;
--                              '' for the root: nothing to do):
--                              'completed' (value its result, nil for none), or 'dead',
--                              'cancelled', 'deleted' (value the error). Its parent, while it
--                              waits for its children, counts it (once: a child replayed that
--                              ends again is not counted again) and moves to pending after its
--                              last; a failure (by the child's on_fail: 'fail' unless 'ignore')
--                              kills the parent instead, and that one's parent in turn
--   flow_cancel(qp, id, reason, by, now)
--                              cancel the waiting children of a parent being cancelled (and
--                              theirs); a running child runs on, its end then moves nothing
--   job_state(qp, id, state)   a job's state from its row's state field as read (a pending job's
--                              row has none: one EXISTS tells it from no row); nil for no row
--   wait_score(prio)           the score a job waits at in the pending set or its lane: minus
--                              its priority (the row's `priority`, absent: 0), so higher runs
--                              first and equal priorities pop in id (mint) order
--   to_pending(qp, id, prio)   put a flat job in the pending set (its row is the caller's)
--   to_waiting(qp, id, g, now, at, prio, ...)
--                              put a job where it waits, its state to match: until `at` on the
--                              schedule ('scheduled'); else in its lane g, or the flat pending
--                              set (pending: no state field), at its priority's place (prio: a
--                              number or nil, as read from its row); ... are a new row's fields
--                              (a new row's priority is one of them, written by the caller)
--   lane_hold(qp, g, id, now, at, prio)
--                              a strict lane keeps its head and waits until `at`
--   lane_paused(qp, g), lane_wait_end(qp, g), lane_limit(qp, g), lane_weight(qp, g),
--   lane_in_flight(qp, g)      a lane's settings and jobs in flight (a queue with no lane paused,
--                              waiting, limited or weighted answers without a command per lane)
--   lane_held(qp, g, now)      lane g is paused, or waiting past now
--   lane_ready(qp, g, now, depth, in_flight)
--                              is lane g serviceable: non-empty, not held, below its limit (depth
--                              and in_flight as the caller knows them; nil: read)
--   ring_add(qp, g, now, depth, in_flight)
--                              put a serviceable lane on the ring once, and wake a consumer
--   lane_entry(value)          a lane's value in the lane index (a hash: jobs in flight, plus
--                              WAITING while jobs wait in the lane) as (in flight, waiting?)
--   lane_push(qp, g, id, now, prio)
--                              put a job into its lane (at its place: its priority, then mint
--                              order), count it in metrics.lane_pending and, when it is the
--                              lane's first, count the lane in metrics.lanes_with_jobs and mark
--                              it WAITING in the lane index
--   lane_emptied(qp, g)        a script took lane g's last waiting job (not by a claim, which
--                              does this for its batch): uncount it, unmark it, forget it if idle
--   lane_forget(qp, g, value)  take a lane whose index value is 0 (nothing waiting, nothing in
--                              flight; nil: read it) and that has no pause and no wait out of
--                              the lane index
--   lane_listed(qp, g)         list lane g in the lane index (at 0 if it was not: a pause, a wait)
--   lane_done(qp, g, now)      one fewer job of lane g in flight; re-ring it if it can go on (in
--                              a queue with no lane limit, nothing else can have taken it off)
--   lane_wait(qp, g, until_ms) hold lane g until a time; a wait only ever extends
--   created(qp, now)           note the queue's creation once (meta.created_ms; now nil: the
--                              server clock is read only then); a queue created so has its lane
--                              counters exact from the start (meta.layout = LAYOUT)
--   schedule_at(qp, id, at)    put a job on the schedule (and tell the metronome if it is first)
--   next_run(at, every, now)   a repeat's next run: the first at + n*every after now
--   in_runs(command, key, items)
--                              run a variadic command (ZADD, ZREM, DEL, SREM, LPUSH, RPUSH) on
--                              key with the items, RUN (1000) at a time (Lua's unpack is bounded;
--                              an even RUN keeps score/member pairs whole); DEL takes no key
--   expiry(arg, now)           an admission's expiry argument ('' none, server ms, '+ms' from
--                              now) as the absolute server ms a row keeps (expires_ms), or nil
--   expiry_fields(arg, at, out)
--                              append to out the row fields of an expiry at `at` (from arg):
--                              expires_ms, and expires_in_ms (its length) for a relative one, so
--                              clock.lua carries a length across a step of the clock
--   row_options(timeout, priority, expires, now)
--                              an admission's per-job options as its ARGV give them ('' for
--                              none each): the row fields beside the payload (timeout_ms,
--                              priority, expires_ms, expires_in_ms), the priority (nil for 0)
--                              and the expiry (absolute server ms, or nil)
--   expire(qp, id, now, drop, attempts)
--                              a job met past its expires_ms, out of its set: dead with the
--                              reason 'expired' (or deleted with drop), counted (metrics.expired)
--   audit(qp, id, outcome, attempts, now, note, err)
--                              when the queue keeps an audit (meta.audit = 1), append the settled
--                              job's record to the audit stream in the same step that settles it
local EVENTS_MAXLEN = 10000
-- meta.layout: the layout of the queue's bookkeeping (echomq_trio/_layouts.py: the registry of
-- upgrades, LAYOUT there). An earlier one makes counts and lane status answer 'outdated' until
-- the upgrades have run; since layout 3 the lane counters (metrics.lane_pending,
-- metrics.lanes_with_jobs) and the lane index are exact.
local LAYOUT = '3'

local WAKE_KEEP = 64
local function wake(qp, n)
  if n < 1 then return end
  if n > WAKE_KEEP then n = WAKE_KEEP end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('LPUSH', qp .. KEY.wake, unpack(tokens)) > 2 * WAKE_KEEP then
    redis.call('LTRIM', qp .. KEY.wake, 0, WAKE_KEEP - 1)
  end
end

local function tick(qp)
  redis.call('LPUSH', qp .. KEY.tick, '1')
  redis.call('LTRIM', qp .. KEY.tick, 0, 0)
end

-- The queue's retention (meta: events, events_maxlen, dead_max, dead_max_age_ms, results_ttl_ms),
-- its creation, its audit flag and its cap on jobs in flight (max_active), read once per script
-- run per queue: nil until the first helper that needs it (kept: the first queue's, the script's
-- own; kept_of: another's, a flow's parent's elsewhere). results: how long a finished job's row
-- is kept with its result (ms), nil for not.
local kept, kept_qp, kept_of = nil, nil, nil

local function retention(qp)
  if qp == kept_qp then return kept end
  local r = kept_of and kept_of[qp]
  if r == nil then
    local m = redis.call('HMGET', qp .. KEY.meta, 'events', 'events_maxlen', 'dead_max',
      'dead_max_age_ms', 'created_ms', 'audit', 'max_active', 'results_ttl_ms')
    r = {events = m[1] ~= '0', maxlen = tonumber(m[2]) or EVENTS_MAXLEN,
      dead_max = tonumber(m[3]), dead_age = tonumber(m[4]), created = m[5], audit = m[6] == '1',
      cap = tonumber(m[7]), results = tonumber(m[8])}
    if kept_qp == nil then
      kept, kept_qp = r, qp
    else
      kept_of = kept_of or {}
      kept_of[qp] = r
    end
  end
  return r
end

-- `freed` jobs just left active. In a queue with a cap on jobs in flight (meta.max_active) a
-- claim the cap cut short left its consumer parked: when this brought active below the cap
-- from at or above it, wake as many consumers as there is room. Without a cap, no command.
local function cap_freed(qp, freed)
  local cap = retention(qp).cap
  if not cap or freed < 1 then return end
  local after = redis.call('ZCARD', qp .. KEY.active)
  if after < cap and after + freed >= cap then wake(qp, math.min(freed, cap - after)) end
end

-- A job finished (completed, dead): tell whoever waits on it (jobs.result). Its channel is
-- named as its row (channels and keys do not share names); only while the queue keeps
-- results, so a queue that keeps none publishes nothing.
local function finished(qp, id, state)
  if retention(qp).results then redis.call('PUBLISH', qp .. KEY.job .. id, state) end
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
local function trim_dead(qp, now, set)
  local r = retention(qp)
  local dead = set or (qp .. KEY.dead)
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
  -- a flow's parent's children's ends go with its row (no key for any other job: DEL ignores it)
  for _, id in ipairs(gone) do redis.call('DEL', qp .. KEY.job .. id, qp .. KEY.flow .. id) end
  return #gone
end

-- A job's row names its state, except a pending job's (state absent, like attempts 0 before the
-- first claim: the fields a waiting job does without).
local function job_state(qp, id, state)
  if state then return state end
  if redis.call('EXISTS', qp .. KEY.job .. id) == 1 then return 'pending' end
  return nil
end

local function held(qp, id, token, or_pending)
  -- On the hot path (ack, extend): one HMGET, its fields named here and nowhere else.
  local f = redis.call('HMGET', qp .. KEY.job .. id, 'state', 'lease', 'attempts', 'group',
    'priority', 'parent')
  local state = f[1]
  if not state then
    -- an active job's row always names its state: EXISTS only for a pending job or no row
    state = job_state(qp, id, nil)
    if not state then return nil, 'gone' end
  end
  local holds = state == 'active' or (or_pending and state == 'pending')
  if f[2] ~= token or not holds then return nil, 'stale' end
  local job = {state = state, lease = f[2], attempts = f[3] or '0', group = f[4] or nil}
  -- a prioritised or a flow's job's only: a table of four fields is the size of the others' (a
  -- fifth doubled it, measured at some 5% of an ack's time on the server)
  if f[5] then job.priority = tonumber(f[5]) end
  if f[6] then job.parent = f[6] end
  return job
end

-- Whether any lane of the queue is paused, waiting, limited or weighted: the EXISTS of that key,
-- read at most once per script run, so in a queue with none of them a lane's check of it costs
-- no command. A script that adds to one of those keys forgets what was read (lanes_changed).
local lane_keys_seen = {}

local function any_lane_in(key)
  local has = lane_keys_seen[key]
  if has == nil then
    has = redis.call('EXISTS', key) == 1
    lane_keys_seen[key] = has
  end
  return has
end

local function lanes_changed(key)
  lane_keys_seen[key] = nil
end

local function lane_paused(qp, g)
  local key = qp .. KEY.paused
  return any_lane_in(key) and redis.call('SISMEMBER', key, g) == 1
end

-- g's entry in a key of lane settings (ZSCORE or HGET) as a number, or nil (no command when no
-- lane of the queue has that setting).
local function lane_setting(key, command, g)
  if not any_lane_in(key) then return nil end
  local value = redis.call(command, key, g)
  if value then return tonumber(value) end
  return nil
end

local function lane_wait_end(qp, g)
  return lane_setting(qp .. KEY.lane_waits, 'ZSCORE', g)
end

local function lane_limit(qp, g)
  return lane_setting(qp .. KEY.lane_limits, 'HGET', g)
end

local function lane_weight(qp, g)
  return lane_setting(qp .. KEY.lane_weights, 'HGET', g) or 1
end

-- The lane index (KEY.lane_index, a hash) lists each lane with waiting jobs, jobs in flight, a
-- pause or a wait. A lane's value is its jobs in flight, plus WAITING while jobs wait in it (added
-- by whoever gives the lane its first job, taken off by whoever takes its last: where
-- metrics.lanes_with_jobs changes), so the script that frees a lane's last slot learns from one
-- HINCRBY whether the lane is idle. A lane with only a pause or a wait is listed at 0.
local WAITING = 4294967296  -- 2^32, far above any count of jobs in flight

-- A lane's index value as (jobs in flight, jobs waiting?). Lua's floored % keeps the count right
-- for a value an earlier version wrote (no WAITING) that a claim then took WAITING from.
local function lane_entry(value)
  value = tonumber(value) or 0
  return value % WAITING, value >= WAITING
end

local function lane_in_flight(qp, g)
  return (lane_entry(redis.call('HGET', qp .. KEY.lane_index, g)))
end

local function lane_held(qp, g, now)
  if lane_paused(qp, g) then return true end
  local until_ms = lane_wait_end(qp, g)
  return until_ms ~= nil and until_ms > now
end

local function lane_ready(qp, g, now, depth, in_flight)
  depth = depth or redis.call('ZCARD', qp .. KEY.lane .. g)
  if depth == 0 or lane_held(qp, g, now) then return false end
  local limit = lane_limit(qp, g)
  if limit and (in_flight or lane_in_flight(qp, g)) >= limit then return false end
  return true
end

local function ring_add(qp, g, now, depth, in_flight)
  -- A caller that does not know the lane's depth mostly has a busy lane, already on the ring:
  -- that is one SISMEMBER.
  if depth == nil and redis.call('SISMEMBER', qp .. KEY.on_ring, g) == 1 then return end
  if lane_ready(qp, g, now, depth, in_flight)
    and redis.call('SADD', qp .. KEY.on_ring, g) == 1 then
    redis.call('RPUSH', qp .. KEY.ring, g)
    wake(qp, 1)
  end
end

-- A job without a priority (nil, or 0) waits at score 0, as every job did before priorities;
-- 0 - p, not -p: -0 would be written as '-0'.
local function wait_score(prio)
  if prio then return 0 - prio end
  return 0
end

local function lane_push(qp, g, id, now, prio)
  local lane = qp .. KEY.lane .. g
  local depth = nil
  if redis.call('ZADD', lane, wait_score(prio), id) == 1 then
    redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', 1)
    -- A lane that held jobs already is counted and in the index: only its first job counts and
    -- lists it, so a batch into one lane writes them once.
    depth = redis.call('ZCARD', lane)
    if depth == 1 then
      redis.call('HINCRBY', qp .. KEY.metrics, 'lanes_with_jobs', 1)
      redis.call('HINCRBY', qp .. KEY.lane_index, g, WAITING)
    end
  end
  ring_add(qp, g, now, depth)
end

local function lane_forget(qp, g, value)
  if value == nil then value = tonumber(redis.call('HGET', qp .. KEY.lane_index, g)) end
  if value ~= 0 or lane_paused(qp, g) or lane_wait_end(qp, g) then return end
  redis.call('HDEL', qp .. KEY.lane_index, g)
end

local function lane_emptied(qp, g)
  redis.call('HINCRBY', qp .. KEY.metrics, 'lanes_with_jobs', -1)
  lane_forget(qp, g, redis.call('HINCRBY', qp .. KEY.lane_index, g, -WAITING))
end

local function lane_done(qp, g, now)
  local value = redis.call('HINCRBY', qp .. KEY.lane_index, g, -1)
  if value == 0 then lane_forget(qp, g, 0) end
  -- A lane leaves the ring while it has jobs only when it is held or at its limit, and whatever
  -- ends a hold puts it back: a freed slot matters only in a queue with lane limits.
  if any_lane_in(qp .. KEY.lane_limits) then ring_add(qp, g, now, nil, (lane_entry(value))) end
end

local function lane_listed(qp, g)
  redis.call('HINCRBY', qp .. KEY.lane_index, g, 0)
end

local function lane_wait(qp, g, until_ms)
  lane_listed(qp, g)
  lanes_changed(qp .. KEY.lane_waits)
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
  now = now or now_ms()
  if redis.call('HSETNX', qp .. KEY.meta, 'created_ms', now) == 1 then
    redis.call('HSET', qp .. KEY.meta, 'layout', LAYOUT)
  end
  r.created = now
end

local function schedule_at(qp, id, at)
  redis.call('ZADD', qp .. KEY.schedule, at, id)
  local head = redis.call('ZRANGE', qp .. KEY.schedule, 0, 0)
  if head[1] == id then tick(qp) end
end

-- A flat job waits in the pending set at minus its priority (0 without one), so the highest
-- priority first and equal priorities in id (mint) order. Returns 1: the consumers it may wake.
local function to_pending(qp, id, prio)
  redis.call('ZADD', qp .. KEY.pending, wait_score(prio), id)
  return 1
end

-- A new row's field/value pairs (...) go into the job's row in the same write (a lane job's row
-- names its group); a row that exists keeps its fields, its state set to match (a pending
-- job's row has none). Returns 1 when the job joined the flat pending set (the caller wakes that
-- many consumers once, at its end), else 0.
local function to_waiting(qp, id, g, now, at, prio, ...)
  local row = qp .. KEY.job .. id
  if select('#', ...) > 0 then
    if at and g then
      redis.call('HSET', row, 'state', 'scheduled', 'group', g, ...)
    elseif at then
      redis.call('HSET', row, 'state', 'scheduled', ...)
    elseif g then
      redis.call('HSET', row, 'group', g, ...)
    else
      redis.call('HSET', row, ...)
    end
  elseif at then
    redis.call('HSET', row, 'state', 'scheduled')
  else
    redis.call('HDEL', row, 'state')
  end
  if at then
    schedule_at(qp, id, at)
    return 0
  end
  if g then
    lane_push(qp, g, id, now, prio)
    return 0
  end
  return to_pending(qp, id, prio)
end

-- The job goes back to the head of its lane (its place: priority, then id) and the whole lane
-- waits until `at`, so nothing behind it overtakes it; other lanes go on. The caller frees its
-- lane slot.
local function lane_hold(qp, g, id, now, at, prio)
  if at > now then lane_wait(qp, g, at) end
  to_waiting(qp, id, g, now, nil, prio)
end

-- Anchored to the schedule: lateness does not drift it, and runs missed while nothing ran
-- collapse into one. Always after `at`.
local function next_run(at, every, now)
  local nxt = at + every * (math.floor((now - at) / every) + 1)
  if nxt <= at then nxt = at + every end
  return nxt
end

local RUN = 1000
local function in_runs(command, key, items)
  for i = 1, #items, RUN do
    if key then
      redis.call(command, key, unpack(items, i, math.min(i + RUN - 1, #items)))
    else
      redis.call(command, unpack(items, i, math.min(i + RUN - 1, #items)))
    end
  end
end

local function audit(qp, id, outcome, attempts, now, note, err)
  if not retention(qp).audit then return end
  -- Never trimmed by a cap: its reader trims below what it has stored (audit_ack).
  redis.call('XADD', qp .. KEY.audit, '*', 'id', id, 'outcome', outcome, 'attempts', attempts,
    'settled_ms', now, 'payload', redis.call('HGET', qp .. KEY.job .. id, 'payload') or '',
    'note', note or '', 'error', err or '')
end

-- A job's expiry as an admission's argument gives it ('' none; server ms; '+ms' from now): the
-- absolute server ms kept in its row as expires_ms, or nil. Only a relative one reads the clock
-- (now nil: read it then).
local function expiry(arg, now)
  if arg == '' then return nil end
  if string.sub(arg, 1, 1) == '+' then return (now or now_ms()) + tonumber(string.sub(arg, 2)) end
  return tonumber(arg)
end

-- An expiry given as a length ('+ms') keeps it beside its time (expires_in_ms): a step of the
-- server clock moves such a deadline with it, as it moves a wait of a length (clock.lua); an
-- expiry given as a time keeps its wall-clock meaning.
local function expiry_fields(arg, at, out)
  out[#out + 1] = 'expires_ms'
  out[#out + 1] = at
  if string.sub(arg, 1, 1) == '+' then
    out[#out + 1] = 'expires_in_ms'
    out[#out + 1] = string.sub(arg, 2)
  end
end

local function row_options(timeout, priority, expires, now)
  local more = {}
  if timeout ~= '' then more = {'timeout_ms', timeout} end
  local prio = tonumber(priority)
  if prio then
    more[#more + 1] = 'priority'
    more[#more + 1] = priority
  end
  local at = expiry(expires, now)
  if at then expiry_fields(expires, at, more) end
  return more, prio, at
end

-- A job a claim met past its expires_ms (taken out of its set by the caller, never leased): kept
-- dead with the reason 'expired', or deleted when the queue drops expired jobs (meta.expired =
-- 'drop'); counted in metrics.expired either way (and metrics.dead when kept), with an event
-- 'expired', its audit record ('dead', or 'dropped' when deleted) and its end published.
local function expire(qp, id, now, drop, attempts)
  local row = qp .. KEY.job .. id
  redis.call('HINCRBY', qp .. KEY.metrics, 'expired', 1)
  emit(qp, 'expired', id, 'attempt', attempts)
  if drop then
    audit(qp, id, 'dropped', attempts, now, '', 'expired')
    redis.call('DEL', row)
  else
    redis.call('HSET', row, 'state', 'dead', 'last_error', 'expired', 'failed_ms', now)
    redis.call('ZADD', qp .. KEY.dead, now, id)
    trim_dead(qp, now)
    redis.call('HINCRBY', qp .. KEY.metrics, 'dead', 1)
    audit(qp, id, 'dead', attempts, now, '', 'expired')
  end
  finished(qp, id, 'dead')
end

-- A job becomes cancelled (cancel.lua; flow_cancel for a cancelled parent's waiting children):
-- its row says who and why, it is kept in the cancelled set, counted, told, audited. `from` is
-- the state it left; the caller took it out of where it waited.
local function cancelled_row(qp, id, from, attempts, reason, by, now)
  local why = 'cancelled'
  if by ~= '' then why = why .. ' by ' .. by end
  if reason ~= '' then why = why .. ': ' .. reason end
  redis.call('HSET', qp .. KEY.job .. id, 'state', 'cancelled', 'cancelled_ms', now,
    'cancel_reason', reason, 'cancelled_by', by, 'last_error', why)
  redis.call('ZADD', qp .. KEY.cancelled, now, id)
  trim_dead(qp, now, qp .. KEY.cancelled)
  redis.call('HINCRBY', qp .. KEY.metrics, 'cancelled', 1)
  emit(qp, 'cancelled', id, 'from', from, 'reason', reason, 'by', by)
  audit(qp, id, 'cancelled', attempts, now, by, reason)
  finished(qp, id, 'cancelled')  -- a waiter on its result (jobs.result) hears it at once
  return why
end

-- A flow's child row names its parent as the parent queue's prefix and the parent's id (a
-- branded id: its last 14 bytes); a parent lists its children so, space-separated.
local function flow_ref(ref)
  return string.sub(ref, 1, -15), string.sub(ref, -14)
end

local function flow_ref_of(prefix, id)
  return prefix .. id
end

local function flow_end(qp, id, ref, how, value, now)
  if ref == '' then return end  -- the flow's root
  local pqp, pid = flow_ref(ref)
  local prow = pqp .. KEY.job .. pid
  local p = redis.call('HMGET', prow, 'state', 'parent', 'attempts', 'priority')
  if p[1] ~= 'waiting_children' then return end  -- failed, cancelled or gone: nothing waits
  local code = nil
  if how == 'completed' then
    code = 'n:'
    if value then code = 'r:' .. value end
  elseif redis.call('HGET', qp .. KEY.job .. id, 'on_fail') == 'ignore' then
    code = 'x:' .. value
    if how == 'dead' then code = 'd:' .. value end
  end
  if code then
    -- A child ends once for its parent: one that ended already (dead under 'ignore', then
    -- replayed) has its record updated but is not counted again.
    if redis.call('HSET', pqp .. KEY.flow .. pid, flow_ref_of(qp, id), code) == 0 then return end
    if redis.call('HINCRBY', prow, 'unfinished', -1) > 0 then return end
    redis.call('ZREM', pqp .. KEY.parents, pid)
    redis.call('HDEL', prow, 'state')
    wake(pqp, to_pending(pqp, pid, tonumber(p[4])))
    emit(pqp, 'ready', pid)
    return
  end
  -- on_fail 'fail': the child's failure is its parent's, and may be that one's parent's
  local why = 'child ' .. id .. ' (queue ' .. string.sub(qp, 6, -3) .. ') ' .. how .. ': ' .. value
  local attempts = p[3] or '0'
  redis.call('ZREM', pqp .. KEY.parents, pid)
  redis.call('HSET', prow, 'state', 'dead', 'last_error', why, 'failed_ms', now)
  redis.call('ZADD', pqp .. KEY.dead, now, pid)
  redis.call('HINCRBY', pqp .. KEY.metrics, 'dead', 1)
  emit(pqp, 'dead', pid, 'attempt', attempts, 'error', why)
  audit(pqp, pid, 'dead', attempts, now, '', why)
  finished(pqp, pid, 'dead')
  if p[2] then flow_end(pqp, pid, p[2], 'dead', why, now) end
  trim_dead(pqp, now)
end

local function flow_cancel(qp, id, reason, by, now)
  local children = redis.call('HGET', qp .. KEY.job .. id, 'children')  -- a parent's
  if not children then return end
  local why = 'parent ' .. id .. ' cancelled'
  if reason ~= '' then why = why .. ': ' .. reason end
  for ref in string.gmatch(children, '%S+') do
    local cqp, cid = flow_ref(ref)
    local f = redis.call('HMGET', cqp .. KEY.job .. cid, 'state', 'attempts')
    local state = job_state(cqp, cid, f[1])
    local out = nil
    if state == 'pending' then
      out = redis.call('ZREM', cqp .. KEY.pending, cid)
    elseif state == 'scheduled' then
      out = redis.call('ZREM', cqp .. KEY.schedule, cid)
    elseif state == 'waiting_children' then
      out = redis.call('ZREM', cqp .. KEY.parents, cid)
      flow_cancel(cqp, cid, reason, by, now)
    end
    if out then cancelled_row(cqp, cid, state, f[2] or '0', why, by, now) end
  end
end
