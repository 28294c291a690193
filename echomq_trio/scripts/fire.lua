-- fire: turn due recurring schedules into jobs, exactly once however many metronomes call it.
-- Each due registration becomes one job (a fresh id from ARGV, the template as payload) in
-- its lane or the flat pending set (with the registration's priority, when it has one), and
-- moves to its next run anchored to the schedule. Every
-- ms: the first of at + n*every after now, so lateness does not drift it and runs missed during
-- downtime collapse into this one occurrence. Cron: Lua cannot compute it, so a due cron
-- registration fires only with a move from the caller (ARGV: its name, the run the caller read,
-- the next run the caller computed: the first occurrence after the server's now), and only if
-- the registration still waits for that very run (compare-and-set: a metronome that read it
-- before another fired it moves nothing); one without a move is answered in `wanted` (its
-- name, run, expression and zone) and left due, for the caller to compute and call again.
-- transition: registered -> registered (+ pending | pending (lane))
-- KEYS[1] emq:{q}:repeat (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] number of cron moves m, then m triples (name, run
-- read in server ms, next run in server ms), then fresh JOB ids (one is used per occurrence
-- fired)
-- Returns {fired, next run of any registration in server ms or -1, server now ms, then per due
-- cron registration without a move: name, run ms, expression, zone}.
-- fields: fired, next_due, now, wanted...
-- fields of each wanted: name, at, cron, tz
-- cost: O(registrations due: at most the ids sent), each O(log n)
local qp = ARGV[1]
local now = now_ms()
local moves = {}
local m = tonumber(ARGV[2])
for i = 3, 2 + 3 * m, 3 do
  moves[ARGV[i]] = {tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])}
end
local next_id = 3 + 3 * m
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'WITHSCORES', 'LIMIT', 0,
  #ARGV - next_id + 1)
local fired = 0
local flat = 0
local wanted = {}
for i = 1, #due, 2 do
  local name = due[i]
  local at = tonumber(due[i + 1])
  local record = qp .. KEY.registration .. name
  local reg = fields(record, 'every_ms', 'cron', 'tz', 'template', 'group', 'priority')
  local nxt = nil
  if not reg.template then
    redis.call('ZREM', KEYS[1], name)  -- an orphan entry without its record
  elseif reg.cron then
    local mv = moves[name]
    if mv and mv[1] == at and mv[2] > at then
      nxt = mv[2]
    else
      wanted[#wanted + 1] = name
      wanted[#wanted + 1] = at
      wanted[#wanted + 1] = reg.cron
      wanted[#wanted + 1] = reg.tz
    end
  else
    nxt = next_run(at, tonumber(reg.every_ms), now)
  end
  if nxt then
    local id = ARGV[next_id]
    next_id = next_id + 1
    redis.call('ZADD', KEYS[1], nxt, name)
    redis.call('HSET', record, 'last_fired_ms', now, 'last_job', id)
    if redis.call('EXISTS', qp .. KEY.job .. id) == 0 then
      local g = reg.group
      if g == '' then g = nil end
      local prio = tonumber(reg.priority)
      if prio then
        flat = flat + to_waiting(qp, id, g, now, nil, prio, 'payload', reg.template,
          'repeat', name, 'occurrence_ms', at, 'priority', reg.priority)
      else
        flat = flat + to_waiting(qp, id, g, now, nil, nil, 'payload', reg.template,
          'repeat', name, 'occurrence_ms', at)
      end
      emit(qp, 'fired', id, 'repeat', name, 'at', at)
      fired = fired + 1
    end
  end
end
wake(qp, flat)
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local nxt = -1
if head[2] then nxt = tonumber(head[2]) end
local out = {fired, nxt, now}
for _, v in ipairs(wanted) do out[#out + 1] = v end
return out
