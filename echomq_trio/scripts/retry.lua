-- retry: the attempt failed; try again after a delay, or bury the job when it has used its
-- attempts.
-- transition: active | waiting_children -> scheduled | pending (lane, waiting) | pending (lane) | dead | pending
-- KEYS[1] emq:{q}:active (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] job id, ARGV[3] fencing token (lease number),
-- ARGV[4] delay ms, ARGV[5] max attempts (attempts >= max buries the job), ARGV[6] error text,
-- ARGV[7] '1' to bury the job now whatever its attempts (a permanent error: 'dropped')
-- A job of a lane with concurrency limit 1 (a strictly ordered lane) goes back to the head of
-- its lane and the lane waits out the delay, so nothing behind it overtakes it; other lane jobs
-- wait on the schedule and return to their lane when due.
-- A job that dies makes room in the dead set when the queue bounds it (trim_dead), and its end
-- is published on its channel when the queue keeps results (finished: for jobs.result).
-- Returns 'scheduled' (to run again), 'dead', 'stale' (the token does not hold the job's lease)
-- or 'gone' (no row).
-- A flow's child that dies fails its parent (on_fail 'fail', the default) or is counted as
-- ended (on_fail 'ignore'), as flow_end says.
-- cost: O(log n) (a flow's child that dies: O(log n) per parent above it that dies with it)
local qp = ARGV[1]
local id = ARGV[2]
local job, why = held(qp, id, ARGV[3])
if not job then return why end
local now = now_ms()
local g = job.group
redis.call('ZREM', KEYS[1], id)
cap_freed(qp, 1)
redis.call('HSET', qp .. KEY.job .. id, 'last_error', ARGV[6], 'failed_ms', now)
if ARGV[7] == '1' or tonumber(job.attempts) >= tonumber(ARGV[5]) then
  redis.call('HSET', qp .. KEY.job .. id, 'state', 'dead')
  redis.call('ZADD', qp .. KEY.dead, now, id)
  trim_dead(qp, now)
  redis.call('HINCRBY', qp .. KEY.metrics, 'dead', 1)
  emit(qp, 'dead', id, 'attempt', job.attempts, 'error', ARGV[6])
  local outcome = 'dead'
  if ARGV[7] == '1' then outcome = 'dropped' end
  audit(qp, id, outcome, job.attempts, now, '', ARGV[6])
  finished(qp, id, 'dead')
  if g then lane_done(qp, g, now) end
  -- a flow's child: its parent dies too, or goes on (its on_fail 'ignore'): flow_end
  if job.parent then flow_end(qp, id, job.parent, 'dead', ARGV[6], now) end
  return 'dead'
end
local at = now + tonumber(ARGV[4])
redis.call('HINCRBY', qp .. KEY.metrics, 'retried', 1)
emit(qp, 'retried', id, 'attempt', job.attempts, 'at', at, 'error', ARGV[6])
if g and lane_limit(qp, g) == 1 then
  lane_hold(qp, g, id, now, at, job.priority)
else
  -- delay_ms: a wait of a length, carried across a step of the clock (clock.lua); the job's
  -- priority is in its row, read again when it is due (promote)
  to_waiting(qp, id, g, now, at, nil, 'delay_ms', ARGV[4])
end
if g then lane_done(qp, g, now) end
return 'scheduled'
