-- defer: put a job back to wait, without spending an attempt (for example: no rate-limit
-- token yet). A lane job returns to the head of its lane and the whole lane waits until then,
-- so the job keeps its place; a flat job waits on the schedule.
-- transition: active -> pending (lane, waiting) | pending (lane) | scheduled
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id, ARGV[3] fencing token (lease number),
-- ARGV[4] delay ms, ARGV[5] reason
-- Returns 'deferred', 'stale' (the token does not hold the job's lease) or 'gone' (no row).
-- cost: O(log n)
local qp = ARGV[1]
local id = ARGV[2]
local job, why = held(qp, id, ARGV[3])
if not job then return why end
local now = now_ms()
local at = now + tonumber(ARGV[4])
redis.call('ZREM', KEYS[1], id)
cap_freed(qp, 1)
redis.call('HINCRBY', qp .. KEY.job .. id, 'attempts', -1)
redis.call('HINCRBY', qp .. KEY.metrics, 'deferred', 1)
emit(qp, 'deferred', id, 'at', at, 'reason', ARGV[5])
if job.group then
  lane_hold(qp, job.group, id, now, at, job.priority)
  lane_done(qp, job.group, now)
else
  to_waiting(qp, id, nil, now, at, nil, 'delay_ms', ARGV[4])  -- a wait of a length (clock.lua)
end
return 'deferred'
