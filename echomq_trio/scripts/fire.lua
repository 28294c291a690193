-- fire: turn due recurring schedules into jobs, exactly once however many metronomes call it.
-- Each due registration becomes one job (a fresh id from ARGV, the template as payload) in
-- its lane or the flat pending set, and moves to its next run anchored to the schedule:
-- the first of at + n*every after now, so lateness does not drift it and runs missed during
-- downtime collapse into this one occurrence.
-- transition: registered -> registered (+ pending | pending (lane))
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, then fresh JOB ids (one is used per occurrence fired)
-- Returns {fired, next run of any registration in server ms or -1, server now ms}.
-- fields: fired, next_due, now
-- cost: O(registrations fired: at most the ids sent), each O(log n)
local qp = ARGV[1]
local now = now_ms()
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'WITHSCORES', 'LIMIT', 0,
  #ARGV - 1)
local fired = 0
local flat = 0
local next_id = 2
for i = 1, #due, 2 do
  local name = due[i]
  local at = tonumber(due[i + 1])
  local reg = fields(qp .. KEY.registration .. name, 'every_ms', 'template', 'group')
  if not reg.every_ms then
    redis.call('ZREM', KEYS[1], name)  -- an orphan entry without its record
  else
    local id = ARGV[next_id]
    next_id = next_id + 1
    redis.call('ZADD', KEYS[1], next_run(at, tonumber(reg.every_ms), now), name)
    redis.call('HSET', qp .. KEY.registration .. name, 'last_fired_ms', now, 'last_job', id)
    if redis.call('EXISTS', qp .. KEY.job .. id) == 0 then
      local g = reg.group
      if g == '' then g = nil end
      flat = flat + to_waiting(qp, id, g, now, nil, 'payload', reg.template,
        'repeat', name, 'occurrence_ms', at)
      emit(qp, 'fired', id, 'repeat', name, 'at', at)
      fired = fired + 1
    end
  end
end
wake(qp, flat)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
return {fired, nxt, now}
