-- clock: carry the queue's waits across a step of the server clock, a page at a time. A wait
-- keeps its length: lane waits (gwait) and the schedule's relative waits (retries, deferrals
-- and enqueue_in: rows with delay_ms) move by the step; a job scheduled at a time (enqueue_at)
-- keeps that wall-clock time; a recurring schedule's next run is brought to at most one period
-- ahead (its anchor kept) after a step back. An expiry given as a length (expires_in, a row
-- with expires_in_ms) is a deadline of a length: it moves by the step, in the row's expires_ms
-- and in the expiries index, so a step back does not let the job run up to a step past its
-- deadline and a step forward does not expire it at once; an expiry given as a time
-- (expires_at) keeps its wall-clock meaning, as enqueue_at's time does. Which expiries are from
-- before a step: after a step back, those past the step's middle (as for waits: one longer than
-- half the step admitted between the step and its carrying may end early by the step); after a
-- step forward, those admitted (expires_ms less expires_in_ms) before the step's middle, read
-- from the whole index (the times on either side of a forward step are a step apart, so none
-- is mistaken). Leases are never shortened under a live holder:
-- after a step forward only a lease that looks expired by more than a second is carried (a
-- renewal after the step cannot look so), after a step back only one more than the longest
-- lease granted (meta.lease_max) and two seconds away; and reaping waits ARGV[6] ms from the
-- step's record (meta.clock_reap_after), so every live holder renews its lease on the new clock
-- first. See "When the clock steps" in scripts/README.md.
-- transition: active | pending (lane, waiting) | scheduled | registered -> active | pending (lane, waiting) | scheduled | registered
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] the server ms the caller last read ('' for none),
-- ARGV[3] ms since that call answered (the caller's monotonic clock), ARGV[4] ms that call
-- took, ARGV[5] batch (most entries looked at by this call), ARGV[6] ms no lease is reaped
-- after a step is recorded
-- A step is recorded by the first witness of it (this script, promote, or an application's
-- script through the prelude's witness); its carrying is meta.clock_fix: 'todo', then
-- '<phase> <cursor>' through the phases active, gwait, schedule, expiries, repeat, then none.
-- While it is set, a claim expires no job (it leases one that looks expired: its expiry may
-- not be carried yet), and promote sweeps none. Each set is
-- read from a bound away from the new clock's times (a step back: ascending; forward:
-- descending), so an entry carried lands behind the cursor and is never carried twice; a page
-- takes every entry of its last score, so the cursor passes that score whole.
-- Returns {step recorded by this call (ms, 0: none), the last step recorded (ms, 0: none),
-- when it was recorded (server ms, -1: never), entries carried by this call, 1 while carrying
-- is left to do (else 0), server now ms}.
-- fields: recorded, step, step_at, carried, more, now
-- cost: O(batch), each O(log n) (plus, per page, the entries that share its last score); an
-- entry of the expiries index reads its row (one HMGET), and one carried writes it (one HSET)
local qp = ARGV[1]
local now = now_ms()
local batch = tonumber(ARGV[5])
local recorded = witness(KEYS[1], now, ARGV[2], ARGV[3], ARGV[4])
local step, at = clock_step(KEYS[1])
local fix = redis.call('HGET', KEYS[1], 'clock_fix')
if fix == 'todo' then
  redis.call('HSET', KEYS[1], 'clock_reap_after', now + tonumber(ARGV[6]))
end
local carried = 0
local PHASES = {'active', 'gwait', 'schedule', 'expiries', 'repeat'}
local SETS = {active = qp .. KEY.active, gwait = qp .. KEY.lane_waits,
  schedule = qp .. KEY.schedule, expiries = qp .. KEY.expiries, ['repeat'] = qp .. KEY.repeats}

-- Where a phase's entries from before the step begin: past the step's middle for waits (the
-- times on either side of a step lie about a step apart), past what no live lease can reach
-- for leases, now for a recurring schedule (only a step back matters to it), and for expiries
-- after a step forward the index's top (nil: +inf; which are from before it, their rows say).
local function bound(phase)
  if phase == 'repeat' then return now end
  if phase == 'expiries' and step > 0 then return nil end
  if phase == 'active' then
    if step > 0 then return at - 1000 end
    return at + (tonumber(redis.call('HGET', KEYS[1], 'lease_max')) or 0) + 2000
  end
  return at - step / 2
end

-- The next page of `key` from `cursor` ('' at the start: the phase's bound) away from the new
-- clock's times: entries (member, score pairs) and the cursor after them ('' when done).
local function page(key, from, cursor, n, ascending)
  if from then from = '(' .. from else from = '+inf' end
  if cursor ~= '' then from = '(' .. cursor end
  local raw
  if ascending then
    raw = redis.call('ZRANGE', key, from, '+inf', 'BYSCORE', 'LIMIT', 0, n, 'WITHSCORES')
  else
    raw = redis.call('ZRANGE', key, from, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, n, 'WITHSCORES')
  end
  if #raw < 2 * n then return raw, '' end
  -- Take the rest of the last score's entries too, so the cursor can pass that score.
  local last = raw[#raw]
  local seen = {}
  for i = 1, #raw, 2 do seen[raw[i]] = true end
  for _, id in ipairs(redis.call('ZRANGE', key, last, last, 'BYSCORE')) do
    if not seen[id] then
      raw[#raw + 1] = id
      raw[#raw + 1] = last
    end
  end
  return raw, last
end

-- A recurring schedule more than a period ahead (the clock stepped back) runs within a period,
-- on its anchor.
local function rein(name, nxt)
  local every = tonumber(redis.call('HGET', qp .. KEY.registration .. name, 'every_ms'))
  if not every or nxt - now <= every then return false end
  local periods = math.ceil((nxt - now - every) / every)
  redis.call('ZADD', qp .. KEY.repeats, nxt - periods * every, name)
  return true
end

-- An expiry given as a length, from before the step (see the header): carried by the step, in
-- its row and in the index.
local function carry_expiry(id)
  local row = qp .. KEY.job .. id
  local f = redis.call('HMGET', row, 'expires_ms', 'expires_in_ms')
  if not (f[1] and f[2]) then return false end
  local expires = tonumber(f[1])
  if step > 0 and expires - tonumber(f[2]) >= at - step / 2 then return false end
  redis.call('HSET', row, 'expires_ms', expires + step)
  redis.call('ZADD', SETS.expiries, expires + step, id)
  return true
end

local left = batch
while fix and left > 0 do
  local phase, cursor = 'active', ''
  if fix ~= 'todo' then phase, cursor = string.match(fix, '^(%a+) ?(.*)$') end
  local raw, after = {}, ''
  if phase ~= 'repeat' or step < 0 then
    raw, after = page(SETS[phase], bound(phase), cursor, left, step < 0 or phase == 'repeat')
  end
  for i = 1, #raw, 2 do
    local member, score = raw[i], tonumber(raw[i + 1])
    if phase == 'repeat' then
      if rein(member, score) then carried = carried + 1 end
    elseif phase == 'expiries' then
      if carry_expiry(member) then carried = carried + 1 end
    elseif phase ~= 'schedule'
      or redis.call('HEXISTS', qp .. KEY.job .. member, 'delay_ms') == 1 then
      redis.call('ZADD', SETS[phase], score + step, member)
      carried = carried + 1
    end
  end
  left = left - #raw / 2
  if after ~= '' then
    fix = phase .. ' ' .. after
  else
    local nxt = nil
    for i, p in ipairs(PHASES) do
      if p == phase then nxt = PHASES[i + 1] end
    end
    if nxt then fix = nxt .. ' ' else fix = nil end
  end
end
if fix then
  redis.call('HSET', KEYS[1], 'clock_fix', fix)
else
  redis.call('HDEL', KEYS[1], 'clock_fix')
end
if carried > 0 then
  emit(qp, 'clock', '', 'step_ms', step or 0, 'carried', carried)
  -- Lanes whose wait now ends sooner, and jobs due sooner: let the metronome look again.
  tick(qp)
end
local more = 0
if fix then more = 1 end
return {recorded, step or 0, at or -1, carried, more, now}
