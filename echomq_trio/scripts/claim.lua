-- claim: lease up to a batch of jobs: round-robin over the lanes on the ring (a lane's weight
-- jobs per turn, within its concurrency limit), interleaved with the flat pending set, oldest id
-- first within each.
-- transition: pending | pending (lane) -> active
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch, ARGV[3] lease ms
-- Each claim raises the job's attempts by one, and its lease number by one: the lease number is
-- the fencing token that ack, retry, defer, extend and release must present. It only ever
-- grows (attempts go back down when a job is deferred or released), so a token is never handed
-- out twice. The lease deadline (server ms) is the job's score in active.
-- Lanes leave the ring lazily: a lane paused, waiting or at its limit stays on it until a claim
-- meets it. A claim takes at most SKIP_MAX such lanes off per call (then it takes what it can
-- from the flat set and leaves a wake token, so the next claim goes on where it stopped).
-- Returns {lease deadline, then per job: id, payload, attempts, token, group or ''}.
-- cost: O(batch + SKIP_MAX) (each step O(log n))
local qp = ARGV[1]
local SKIP_MAX = 100
local want = tonumber(ARGV[2])
local now = now_ms()
local deadline = now + tonumber(ARGV[3])
local active = qp .. KEY.active
local out = {deadline}

local function take(id, g)
  local row = qp .. KEY.job .. id
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  local token = redis.call('HINCRBY', row, 'lease', 1)
  redis.call('HSET', row, 'state', 'active')
  redis.call('ZADD', active, deadline, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', row, 'payload')
  out[#out + 1] = attempts
  out[#out + 1] = token
  out[#out + 1] = g
  emit(qp, 'claimed', id, 'attempt', attempts)
end

local function take_flat(n)
  local popped = redis.call('ZPOPMIN', KEYS[1], n)
  for i = 1, #popped, 2 do take(popped[i], '') end
  return #popped / 2
end

-- Each turn either claims from a lane or takes a lane off the ring, so this loop ends.
local skipped = 0
while want > 0 do
  if redis.call('LLEN', qp .. KEY.ring) == 0 then
    take_flat(want)
    break
  end
  if skipped >= SKIP_MAX then
    take_flat(want)
    wake(qp, 1)
    break
  end
  local g = redis.call('LMOVE', qp .. KEY.ring, qp .. KEY.ring, 'LEFT', 'RIGHT')
  local lane = qp .. KEY.lane .. g
  if lane_ready(qp, g, now) then
    local n = tonumber(redis.call('HGET', qp .. KEY.lane_weights, g) or '1')
    if n > want then n = want end
    local limit = redis.call('HGET', qp .. KEY.lane_limits, g)
    if limit then
      local in_flight = redis.call('HGET', qp .. KEY.lane_in_flight, g) or '0'
      local room = tonumber(limit) - tonumber(in_flight)
      if n > room then n = room end
    end
    local popped = redis.call('ZPOPMIN', lane, n)
    for i = 1, #popped, 2 do take(popped[i], g) end
    local got = #popped / 2
    redis.call('HINCRBY', qp .. KEY.lane_in_flight, g, got)
    redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -got)
    want = want - got
    if redis.call('ZCARD', lane) == 0 then redis.call('SREM', qp .. KEY.lane_groups, g) end
  else
    skipped = skipped + 1
  end
  if not lane_ready(qp, g, now) then
    -- g was just rotated to the tail: take it off the ring until it can go on.
    redis.call('RPOP', qp .. KEY.ring)
    redis.call('SREM', qp .. KEY.on_ring, g)
  end
  if want > 0 then want = want - take_flat(1) end
end
return out
