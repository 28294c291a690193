-- fire: turn due recurring schedules into jobs, exactly once however many metronomes call it.
-- Each due registration becomes one job (a fresh id from ARGV, the template as payload) in
-- its lane or the flat pending set, and moves to its next run anchored to the schedule:
-- the first of at + k*every after now, so lateness does not drift it and runs missed during
-- downtime collapse into this one occurrence.  registered -> registered (+ a pending job)
-- KEYS[1] emq:{q}:repeat (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, then fresh JOB ids (one is used per occurrence fired)
-- Returns {fired, next run of any registration in server ms or -1, server now ms}.
local qp = ARGV[1]
local now = now_ms()
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'WITHSCORES', 'LIMIT', 0, #ARGV - 1)
local fired = 0
local flat = 0
local next_id = 2
for i = 1, #due, 2 do
  local name = due[i]
  local at = tonumber(due[i + 1])
  local f = redis.call('HMGET', qp .. 'repeat:' .. name, 'every_ms', 'template', 'group')
  if not f[1] then
    redis.call('ZREM', KEYS[1], name)  -- an orphan entry without its record
  else
    local id = ARGV[next_id]
    next_id = next_id + 1
    local row = qp .. 'job:' .. id
    local every = tonumber(f[1])
    local nxt = at + every * (math.floor((now - at) / every) + 1)
    redis.call('ZADD', KEYS[1], nxt, name)
    redis.call('HSET', qp .. 'repeat:' .. name, 'last_fired_ms', now, 'last_job', id)
    if redis.call('EXISTS', row) == 0 then
      redis.call('HSET', row, 'state', 'pending', 'attempts', 0, 'payload', f[2],
        'repeat', name, 'occurrence_ms', at)
      emit(qp, 'fired', id, 'repeat', name, 'at', at)
      if f[3] ~= '' then
        redis.call('HSET', row, 'group', f[3])
        lane_push(qp, f[3], id, now)
      else
        redis.call('ZADD', qp .. 'pending', 0, id)
        flat = flat + 1
      end
      fired = fired + 1
    end
  end
end
wake(qp, flat)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
return {fired, nxt, now}
