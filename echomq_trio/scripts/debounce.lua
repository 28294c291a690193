-- debounce: admit a job under a debounce key: while the key's job waits (never claimed), take
-- the enqueue into it (the latest payload wins, its run time slides); else start a new period.
-- transition: (none) | scheduled | pending | pending (lane) -> scheduled | pending | pending (lane)
-- KEYS[1] emq:{q}:schedule (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] debounce key, ARGV[3] debounce ms (the quiet period),
-- ARGV[4] max wait ms ('' for no bound: from the period's first enqueue, the latest the job
-- runs), ARGV[5] how long the key outlives its job's run-at, ms, ARGV[6] group ('' for the flat
-- pending set), ARGV[7] the job's timeout in ms ('' for none), ARGV[8] its expiry ('' for none;
-- server ms, or '+ms' from the server's now), ARGV[9] the id of the job a new period starts,
-- ARGV[10] payload, ARGV[11] the job's priority ('' for none: 0; a new period's, kept in its
-- row as priority; an enqueue taken into a waiting job leaves the job's as it is, as its lane)
-- emq:{q}:debounce:<key> names the key's job. While that job waits and was never claimed (its
-- row names the key and has no lease), the enqueue is taken into it: its payload, timeout and
-- expiry become this call's, and a job still on the schedule moves to now + debounce ms, but
-- never past its debounce_until_ms (the first enqueue's time + max wait); a job already due
-- (pending: its time came) keeps its place. Otherwise (no key, or its job claimed, finished,
-- dead, cancelled or deleted) the job ARGV[9] is admitted to run at now + debounce ms (within
-- the bound) and the key names it. The key's TTL is its job's run-at less now plus ARGV[5].
-- Returns {'scheduled', the new job's id, run-at, 1}, {'debounced', the waiting job's id, its
-- run-at (now for a job already due), the enqueues it stands for}, or {'duplicate', id, 0, 0}
-- (a new period's id has a row: nothing is changed).
-- fields: outcome, id, at, absorbed
-- cost: O(log n): one GET and one HMGET, then about 6 commands
local qp = ARGV[1]
local name = ARGV[2]
local dkey = qp .. KEY.debounce .. name
local now = now_ms()
created(qp, now)
local expires = expiry(ARGV[8], now)
local at = now + tonumber(ARGV[3])
local keep = tonumber(ARGV[5])
local prio = tonumber(ARGV[11])

-- The options of this enqueue, for a row: set those given, unset those not (the latest wins).
local set, unset = {'payload', ARGV[10]}, {}
if ARGV[7] ~= '' then
  set[#set + 1] = 'timeout_ms'
  set[#set + 1] = ARGV[7]
else
  unset[#unset + 1] = 'timeout_ms'
end
if expires then
  expiry_fields(ARGV[8], expires, set)
end
if not expires or string.sub(ARGV[8], 1, 1) ~= '+' then
  unset[#unset + 1] = 'expires_in_ms'  -- none, or a time: no length to carry across a step
  if not expires then unset[#unset + 1] = 'expires_ms' end
end

local cur = redis.call('GET', dkey)
if cur then
  local row = qp .. KEY.job .. cur
  local f = redis.call('HMGET', row, 'state', 'lease', 'debounce', 'debounce_until_ms')
  -- the row names the key (so it exists), was never claimed, and waits
  if f[3] == name and not f[2] and (f[1] == 'scheduled' or not f[1]) then
    redis.call('HSET', row, unpack(set))
    if #unset > 0 then redis.call('HDEL', row, unpack(unset)) end
    local n = redis.call('HINCRBY', row, 'debounced', 1)
    if expires then redis.call('ZADD', qp .. KEY.expiries, expires, cur) end
    if f[1] == 'scheduled' then
      local bound = tonumber(f[4])
      if bound and at > bound then at = bound end
      schedule_at(qp, cur, at)
    else
      at = now  -- due already: it runs with this payload
    end
    redis.call('PEXPIRE', dkey, math.max(at - now, 0) + keep)
    emit(qp, 'debounced', cur, 'at', at)
    return {'debounced', cur, at, n}
  end
end

local id = ARGV[9]
if redis.call('EXISTS', qp .. KEY.job .. id) == 1 then return {'duplicate', id, 0, 0} end
local g = ARGV[6]
if g == '' then g = nil end
set[#set + 1] = 'debounce'
set[#set + 1] = name
set[#set + 1] = 'debounced'
set[#set + 1] = 1
if ARGV[4] ~= '' then
  local bound = now + tonumber(ARGV[4])
  if at > bound then at = bound end
  set[#set + 1] = 'debounce_until_ms'
  set[#set + 1] = bound
end
if prio then
  set[#set + 1] = 'priority'
  set[#set + 1] = ARGV[11]
end
to_waiting(qp, id, g, now, at, prio, unpack(set))
if expires then redis.call('ZADD', qp .. KEY.expiries, expires, id) end
redis.call('SET', dkey, id, 'PX', at - now + keep)
emit(qp, 'scheduled', id, 'at', at, 'debounce', name)
return {'scheduled', id, at, 1}
