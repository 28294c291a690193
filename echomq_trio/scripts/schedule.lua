-- schedule: admit jobs to run at a time (enqueue_at) or after a delay (enqueue_in).
-- (none) -> scheduled
-- KEYS[1] emq:{q}:schedule (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] 'at' (absolute Unix ms) or 'in' (ms from the server's now),
-- ARGV[3] group ('' for the flat pending set), then triples: job id, payload, time or delay
-- Returns one integer per job, in order: the run-at in server ms, or -1 for a duplicate.
local qp = ARGV[1]
local relative = ARGV[2] == 'in'
local g = ARGV[3]
local now = now_ms()
redis.call('HSETNX', qp .. 'meta', 'created_ms', now)
local out = {}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local row = qp .. 'job:' .. id
  if redis.call('EXISTS', row) == 1 then
    out[#out + 1] = -1
  else
    local at = tonumber(ARGV[i + 2])
    if relative then at = now + at end
    redis.call('HSET', row, 'state', 'scheduled', 'attempts', 0, 'payload', ARGV[i + 1])
    if g ~= '' then redis.call('HSET', row, 'group', g) end
    schedule_at(qp, id, at)
    emit(qp, 'scheduled', id, 'at', at)
    out[#out + 1] = at
  end
end
return out
