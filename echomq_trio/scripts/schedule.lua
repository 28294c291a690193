-- schedule: admit jobs to run at a time (enqueue_at) or after a delay (enqueue_in).
-- transition: (none) -> scheduled
-- KEYS[1] emq:{q}:schedule (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'at' (absolute Unix ms) or 'in' (ms from the server's
-- now), ARGV[3] group ('' for the flat pending set), ARGV[4] the jobs' timeout in ms ('' for
-- none: kept in each row as timeout_ms, the handler's deadline per attempt), ARGV[5] the jobs'
-- job waits in pending or its lane at its priority's place), ARGV[6] the jobs' expiry ('' for
-- none; server ms, or '+ms' from the server's now: kept in each row as expires_ms and in
-- emq:{q}:expiries, as for enqueue; a job whose run-at is past it never runs), then triples: job
-- id, payload, time or delay
-- Returns per job, in order: {'scheduled', run-at in server ms}, or {'duplicate'} (a row with
-- that id exists; nothing is changed).
-- fields of each job: outcome, at?
-- cost: O(jobs admitted), each O(log n); at most ENQUEUE_CHUNK (10,000) jobs a call
local qp = ARGV[1]
local relative = ARGV[2] == 'in'
local g = ARGV[3]
if g == '' then g = nil end
local now = now_ms()
created(qp, now)
local out = {}
local more, prio, expires = row_options(ARGV[4], ARGV[5], ARGV[6], now)
for i = 7, #ARGV, 3 do
  local id = ARGV[i]
  if redis.call('EXISTS', qp .. KEY.job .. id) == 1 then
    out[#out + 1] = {'duplicate'}
  else
    local at = tonumber(ARGV[i + 2])
    if relative then
      -- delay_ms: a wait of a length, carried across a step of the clock (clock.lua); a time
      -- given ('at') keeps its wall-clock meaning
      at = now + at
      to_waiting(qp, id, g, now, at, prio, 'payload', ARGV[i + 1], 'delay_ms', ARGV[i + 2],
        unpack(more))
    else
      to_waiting(qp, id, g, now, at, prio, 'payload', ARGV[i + 1], unpack(more))
    end
    if expires then redis.call('ZADD', qp .. KEY.expiries, expires, id) end
    emit(qp, 'scheduled', id, 'at', at)
    out[#out + 1] = {'scheduled', at}
  end
end
return out
