-- promote: move scheduled jobs whose run-at has come to pending (or back into their lane), and
-- bring lanes whose wait is over back onto the ring; and sweep waiting jobs past their expiry
-- that no claim has met (a queue nobody claims from would keep them for ever).
-- transition: scheduled | pending (lane, waiting) | pending | pending (lane) -> pending | pending (lane) | dead | (none)
-- KEYS[1] emq:{q}:schedule (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] batch (most jobs and most lanes handled by this call),
-- ARGV[3] '1': also answer how late each moved job was ('0' or absent: not), ARGV[4..6]
-- (optional) the caller's witness of the server clock: the server ms it last read ('' for
-- none), ms since that call answered (its monotonic clock), ms that call took (see the
-- prelude's witness; a step it shows is recorded)
-- While the queue's waits are being carried across a step of the clock (meta.clock_fix, see
-- clock.lua) nothing is moved: the answer says so, and the caller runs clock first.
-- Returns {jobs moved, lanes resumed, next due time (earliest run-at or lane wait, server ms;
-- -1 when none), server now ms, 1 while the clock's step is being carried (else 0), the
-- microseconds of the server clock past now (0-999: a caller sleeping until the next due time
-- wakes at the right instant within the ms)}; with ARGV[3] = '1', followed by each moved job's
-- lateness (now minus its score: its run-at, or the end of its backoff or deferral; ms).
-- The sweep: up to a batch of emq:{q}:expiries (jobs admitted with an expiry, by expires_ms) up
-- to now leave that index; each that still waits (pending, in its lane or not, or scheduled)
-- and whose row's expires_ms is past is taken out of its set and expired as a claim would
-- (_bus.lua's expire: dead with the reason 'expired', or dropped). A job leased, finished or
-- expired already only leaves the index. A queue with no job of an expiry pays one ZRANGE.
-- fields: moved, lanes_resumed, next_due, now, carrying, now_us, lateness...
-- cost: O(batch), each O(log n); the sweep O(batch) more, one command without expiring jobs
local qp = ARGV[1]
local batch = tonumber(ARGV[2])
local report = ARGV[3] == '1'
local time = redis.call('TIME')  -- as now_ms() reads it, the microseconds kept
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[2]) % 1000
local meta = qp .. KEY.meta
if ARGV[4] then witness(meta, now, ARGV[4], ARGV[5], ARGV[6]) end
if redis.call('HEXISTS', meta, 'clock_fix') == 1 then return {0, 0, -1, now, 1, now_us} end
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, batch, 'WITHSCORES')
local flat = 0
local late = {}
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[1], id)
  local f = redis.call('HMGET', qp .. KEY.job .. id, 'group', 'priority')
  flat = flat + to_waiting(qp, id, f[1] or nil, now, nil, tonumber(f[2]))
  if report then late[#late + 1] = now - tonumber(due[i + 1]) end
end
wake(qp, flat)
local lanes = redis.call('ZRANGE', qp .. KEY.lane_waits, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
for _, g in ipairs(lanes) do
  redis.call('ZREM', qp .. KEY.lane_waits, g)
  ring_add(qp, g, now)
  lane_forget(qp, g)
end
local swept = redis.call('ZRANGE', qp .. KEY.expiries, '-inf', now, 'BYSCORE', 'LIMIT', 0, batch)
if #swept > 0 then
  local drop = redis.call('HGET', meta, 'expired') == 'drop'
  local from_lanes, lanes_left = 0, {}
  for _, id in ipairs(swept) do
    local f = redis.call('HMGET', qp .. KEY.job .. id, 'state', 'group', 'expires_ms', 'attempts')
    local e = tonumber(f[3])
    local state = nil
    if e and e <= now then state = job_state(qp, id, f[1]) end
    if state == 'scheduled' or state == 'pending' then
      local g = f[2]
      if state == 'scheduled' then
        redis.call('ZREM', KEYS[1], id)
      elseif g then
        redis.call('ZREM', qp .. KEY.lane .. g, id)
        from_lanes = from_lanes + 1
        lanes_left[g] = true
      else
        redis.call('ZREM', qp .. KEY.pending, id)
      end
      expire(qp, id, now, drop, f[4] or '0')
    end
  end
  if from_lanes > 0 then redis.call('HINCRBY', qp .. KEY.metrics, 'lane_pending', -from_lanes) end
  for g in pairs(lanes_left) do
    if redis.call('ZCARD', qp .. KEY.lane .. g) == 0 then lane_emptied(qp, g) end
  end
  in_runs('ZREM', qp .. KEY.expiries, swept)
end
local nxt = -1
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then nxt = tonumber(head[2]) end
head = redis.call('ZRANGE', qp .. KEY.lane_waits, 0, 0, 'WITHSCORES')
if head[2] and (nxt < 0 or tonumber(head[2]) < nxt) then nxt = tonumber(head[2]) end
local out = {#due / 2, #lanes, nxt, now, 0, now_us}
for _, ms in ipairs(late) do out[#out + 1] = ms end
return out
