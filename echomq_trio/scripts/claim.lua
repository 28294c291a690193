-- claim: lease up to a batch of jobs: round-robin over the lanes on the ring (a lane's weight
-- jobs per turn, within its concurrency limit), interleaved with the flat pending set, oldest id
-- first within each.
-- transition: pending | pending (lane) -> active | dead | (none)
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch, ARGV[3] lease ms, ARGV[4] the holder (the
-- claiming bus's id, kept in the row: a restart that knows its predecessor dead takes back what
-- that holder leased, see reap; '' for none)
-- Each claim raises the job's attempts by one, and its lease number by one: the lease number is
-- the fencing token that ack, retry, defer, extend and release must present. It only ever
-- grows (attempts go back down when a job is deferred or released), so a token is never handed
-- out twice. The lease deadline (server ms) is the job's score in active.
-- Lanes leave the ring lazily: a lane paused, waiting or at its limit stays on it until a claim
-- meets it. A claim takes at most SKIP_MAX such lanes off per call (then it takes what it can
-- from the flat set and leaves a wake token, so the next claim goes on where it stopped).
-- A job met past its expiry (its row's expires_ms, read with the row) is never leased: it goes
-- to the dead set with the reason 'expired', or is deleted where the queue drops expired jobs
-- (meta.expired = 'drop'), counted in metrics.expired (_bus.lua's expire). That holds for a
-- retry too: a job not started again by its expiry is not run again. A claim expires at most
-- EXPIRE_MAX jobs per call (then it leaves a wake token, so the next claim goes on); an
-- expired job is out of its lane, so it never blocks a strictly ordered lane. While a step of
-- the server clock is carried (meta.clock_fix, clock.lua) a claim expires nothing: an expiry
-- given as a length may not be carried yet, so a job that looks expired is leased.
-- Returns {lease deadline, then per job: id, payload, attempts, token, group or '', options}:
-- options is '' (none), the job's timeout ms (a timeout alone), or {timeout ms or '', priority}
-- (a priority, with or without a timeout), so a job without a priority answers what it did
-- before priorities, byte for byte. The priority is read from the score the job was popped at:
-- a job waits in pending and in its lane at minus its priority (_bus.lua's wait_score, the only
-- writer of either), so it costs no read of the row.
-- meta.lease_max keeps the longest lease ms granted; meta.paused (the queue is paused),
-- meta.max_active (a cap on its jobs in flight), meta.expired and meta.clock_fix are read with
-- it (one HMGET per call).
-- fields: lease_deadline, jobs...
-- fields of each job: id, payload, attempts, token, group, options
-- cost: O(batch + SKIP_MAX) (each step O(log n)); one HMGET of meta (with a cap, one ZCARD);
-- per job 3 commands (its row read and written, its event), per lane turn 3 (in a queue with
-- lanes paused, waiting, limited or weighted, up to 5 more); per call one ZADD, one LPUSH, RPUSH
-- and SREM of the ring's lanes for each RUN (1000) of them, and one LPOP for each run of lanes
-- read (another when the lanes read gave too few jobs); per expired job about 6 more (its
-- row, its place in dead, its counters and event; 1 more ZPOPMIN per run of them)
local qp = ARGV[1]
local SKIP_MAX = 100
local EXPIRE_MAX = 100
local want = tonumber(ARGV[2])
local now = now_ms()
local deadline = now + tonumber(ARGV[3])
-- meta, one HMGET a call: the longest lease granted (lease_max: what no lease of a live holder
-- can pass, for carrying leases across a step of the clock, clock.lua); the queue's pause
-- (paused: nothing is claimed) and its cap on jobs in flight (max_active: at most that many in
-- active, so at most the cap less active's size is claimed). See queue_pause, queue_limit.
local m = redis.call('HMGET', qp .. KEY.meta, 'lease_max', 'paused', 'max_active', 'expired',
  'clock_fix')
if m[2] then return {deadline} end
if m[3] then
  local room = tonumber(m[3]) - redis.call('ZCARD', qp .. KEY.active)
  if room < want then want = room end
  if want <= 0 then return {deadline} end
end
if tonumber(m[1] or '0') < tonumber(ARGV[3]) then
  redis.call('HSET', qp .. KEY.meta, 'lease_max', ARGV[3])
end
local holder = ARGV[4] or ''
local ring = qp .. KEY.ring
local out = {deadline}
local leased = {}  -- score, id pairs: one ZADD to active at the end
local flat_left = true  -- the flat set may hold jobs (a claim never adds to it)
local from_lanes, emptied = 0, 0  -- counted in metrics once, at the end
local expired, drop_expired = 0, m[4] == 'drop'
local carrying = m[5] and true or false  -- a step of the clock is being carried: expire none

-- Lease a job taken out of its set at `score` (true), or expire it (false: never leased).
local function take(id, g, score)
  local row = qp .. KEY.job .. id
  local f = redis.call('HMGET', row, 'attempts', 'lease', 'payload', 'timeout_ms', 'expires_ms')
  if f[5] and tonumber(f[5]) <= now and not carrying then
    expire(qp, id, now, drop_expired, f[1] or '0')
    expired = expired + 1
    return false
  end
  local attempts = (tonumber(f[1]) or 0) + 1
  local token = (tonumber(f[2]) or 0) + 1
  redis.call('HSET', row, 'state', 'active', 'attempts', attempts, 'lease', token, 'holder',
    holder)
  leased[#leased + 1] = deadline
  leased[#leased + 1] = id
  out[#out + 1] = id
  out[#out + 1] = f[3]
  out[#out + 1] = attempts
  out[#out + 1] = token
  out[#out + 1] = g
  if score == '0' then
    out[#out + 1] = f[4] or ''
  else
    out[#out + 1] = {f[4] or '', 0 - tonumber(score)}
  end
  emit(qp, 'claimed', id, 'attempt', attempts)
  return true
end

-- Lease up to n flat jobs: a run of expired ones is made up for by popping again (a queue with
-- no expiry pops once).
local function take_flat(n)
  local got = 0
  while flat_left and got < n and expired < EXPIRE_MAX do
    local ask = n - got
    local popped = redis.call('ZPOPMIN', KEYS[1], ask)
    if #popped / 2 < ask then flat_left = false end
    for i = 1, #popped, 2 do
      if take(popped[i], '', popped[i + 1]) then got = got + 1 end
    end
  end
  return got
end

-- The ring is read from its head in runs (one LPOP of up to the jobs still wanted). A lane
-- served that can go on joins `back`, in turn order, for the ring's tail; once the ring is used
-- up, `back` is the rest of the ring and the claim goes round it again. At the end the lanes
-- read but not reached go back to the head, in order, `back` to the tail, and the lanes that
-- left are dropped from on_ring: a few commands per call, not per turn.
local turns, next_turn = {}, 1  -- lanes read from the ring, turns[next_turn..] not yet reached
local ring_left = true  -- the ring may hold lanes not yet read
local back, left = {}, {}

local function next_lane()
  if next_turn > #turns then
    next_turn = 1
    turns = ring_left and redis.call('LPOP', ring, math.min(want, RUN)) or {}
    if #turns < math.min(want, RUN) then ring_left = false end
    if #turns == 0 then turns, back = back, {} end
  end
  local g = turns[next_turn]
  if g then next_turn = next_turn + 1 end
  return g
end

-- Each turn either claims from a lane or takes a lane off the ring, so this loop ends.
local skipped = 0
while want > 0 do
  if skipped >= SKIP_MAX or expired >= EXPIRE_MAX then
    take_flat(want)
    if skipped >= SKIP_MAX then wake(qp, 1) end
    break
  end
  local g = next_lane()
  if not g then
    take_flat(want)
    break
  end
  local lane = qp .. KEY.lane .. g
  local depth = redis.call('ZCARD', lane)
  local ready = depth > 0 and not lane_held(qp, g, now)
  local limit = nil
  local in_flight = 0
  if ready then
    limit = lane_limit(qp, g)
    if limit then
      in_flight = lane_in_flight(qp, g)
      ready = in_flight < limit
    end
  end
  if ready then
    local n = math.min(lane_weight(qp, g), want, depth)
    if limit and n > limit - in_flight then n = limit - in_flight end
    local popped = redis.call('ZPOPMIN', lane, n)
    local got = 0  -- leased; the others expired
    for i = 1, #popped, 2 do
      if take(popped[i], g, popped[i + 1]) then got = got + 1 end
    end
    from_lanes = from_lanes + #popped / 2
    want = want - got
    depth = depth - #popped / 2
    -- Its jobs in flight, and no longer WAITING in the lane index once it is empty: one HINCRBY.
    local change = got
    if depth == 0 then
      emptied = emptied + 1
      change = got - WAITING
    end
    local value = redis.call('HINCRBY', qp .. KEY.lane_index, g, change)
    in_flight = lane_entry(value)
    if value == 0 then lane_forget(qp, g, 0) end  -- only expired jobs, its last: idle now
    -- Still serviceable? Its hold cannot have changed; its depth and jobs in flight have.
    ready = depth > 0 and not (limit and in_flight >= limit)
  else
    skipped = skipped + 1
  end
  if ready then back[#back + 1] = g else left[#left + 1] = g end
  if want > 0 then want = want - take_flat(1) end
end
-- Stopped short by expired jobs: the next claim goes on where this one stopped.
if expired >= EXPIRE_MAX then wake(qp, 1) end
local unread = {}
for i = #turns, next_turn, -1 do unread[#unread + 1] = turns[i] end
in_runs('LPUSH', ring, unread)
in_runs('RPUSH', ring, back)
in_runs('SREM', qp .. KEY.on_ring, left)
if from_lanes > 0 then redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -from_lanes) end
if emptied > 0 then redis.call('HINCRBY', qp .. KEY.metrics, 'lanes_with_jobs', -emptied) end
in_runs('ZADD', qp .. KEY.active, leased)
return out
