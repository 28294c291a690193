-- claim: lease up to a batch of jobs: round-robin over the lanes on the ring (a lane's weight
-- jobs per turn, within its concurrency limit), interleaved with the flat pending set, oldest id
-- first within each.  pending -> active
-- KEYS[1] emq:{q}:pending (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] batch, ARGV[3] lease ms
-- Each claim raises the job's attempts by one, and its lease number by one: the lease number is
-- the fencing token that ack, retry, defer, extend and release must present. It only ever
-- grows (attempts go back down when a job is deferred or released), so a token is never handed
-- out twice. The lease deadline (server ms) is the job's score in active.
-- Returns {lease deadline, then per job: id, payload, attempts, token, group or ''}.
local qp = ARGV[1]
local want = tonumber(ARGV[2])
local now = now_ms()
local deadline = now + tonumber(ARGV[3])
local active_key = qp .. 'active'
local out = {deadline}

local function take(id, g)
  local row = qp .. 'job:' .. id
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  local token = redis.call('HINCRBY', row, 'lease', 1)
  redis.call('HSET', row, 'state', 'active')
  redis.call('ZADD', active_key, deadline, id)
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

local ring = qp .. 'ring'
-- Each turn either claims from a lane or takes a lane off the ring, so this loop ends.
while want > 0 do
  if redis.call('LLEN', ring) == 0 then
    take_flat(want)
    break
  end
  local g = redis.call('LMOVE', ring, ring, 'LEFT', 'RIGHT')
  local lane = qp .. 'g:' .. g
  if lane_ready(qp, g, now) then
    local k = tonumber(redis.call('HGET', qp .. 'gweight', g) or '1')
    if k > want then k = want end
    local limit = redis.call('HGET', qp .. 'glimit', g)
    if limit then
      local room = tonumber(limit) - tonumber(redis.call('HGET', qp .. 'gactive', g) or '0')
      if k > room then k = room end
    end
    local popped = redis.call('ZPOPMIN', lane, k)
    for i = 1, #popped, 2 do take(popped[i], g) end
    local got = #popped / 2
    redis.call('HINCRBY', qp .. 'gactive', g, got)
    want = want - got
    if redis.call('ZCARD', lane) == 0 then redis.call('SREM', qp .. 'groups', g) end
  end
  if not lane_ready(qp, g, now) then
    -- g was just rotated to the tail: take it off the ring until it can go on.
    redis.call('RPOP', ring)
    redis.call('SREM', qp .. 'inring', g)
  end
  if want > 0 then want = want - take_flat(1) end
end
return out
