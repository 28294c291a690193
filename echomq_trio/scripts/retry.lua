-- retry: the attempt failed; try again after a delay, or bury the job when it has used its
-- attempts.  active -> scheduled | pending (lane, waiting) | dead
-- KEYS[1] emq:{q}:active (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] job id, ARGV[3] fencing token (lease number), ARGV[4] delay ms,
-- ARGV[5] max attempts (attempts >= max buries the job), ARGV[6] error text,
-- ARGV[7] '1' to bury the job now whatever its attempts (a permanent error: 'dropped')
-- A job of a lane with concurrency limit 1 (a strictly ordered lane) goes back to the head of
-- its lane and the lane waits out the delay, so nothing behind it overtakes it; other lane jobs
-- wait on the schedule and return to their lane when due.
-- Returns 1 scheduled, 2 dead, 0 stale (token mismatch or not active), -1 gone.
local qp = ARGV[1]
local id = ARGV[2]
local row = qp .. 'job:' .. id
local f = redis.call('HMGET', row, 'state', 'attempts', 'group', 'lease')
if not f[1] then return -1 end
if f[1] ~= 'active' or f[4] ~= ARGV[3] then return 0 end
local now = now_ms()
local g = f[3]
redis.call('ZREM', KEYS[1], id)
redis.call('HSET', row, 'last_error', ARGV[6], 'failed_ms', now)
if ARGV[7] == '1' or tonumber(f[2]) >= tonumber(ARGV[5]) then
  redis.call('HSET', row, 'state', 'dead')
  redis.call('ZADD', qp .. 'dead', now, id)
  redis.call('HINCRBY', qp .. 'metrics', 'dead', 1)
  emit(qp, 'dead', id, 'attempt', f[2], 'error', ARGV[6])
  local outcome = 'dead'
  if ARGV[7] == '1' then outcome = 'dropped' end
  audit(qp, row, id, outcome, f[2], now, '', ARGV[6])
  if g then lane_done(qp, g, now) end
  return 2
end
local at = now + tonumber(ARGV[4])
redis.call('HINCRBY', qp .. 'metrics', 'retried', 1)
emit(qp, 'retried', id, 'attempt', f[2], 'at', at, 'error', ARGV[6])
if g and redis.call('HGET', qp .. 'glimit', g) == '1' then
  redis.call('HSET', row, 'state', 'pending')
  if at > now then lane_wait(qp, g, at) end
  lane_push(qp, g, id, now)
  lane_done(qp, g, now)
  return 1
end
redis.call('HSET', row, 'state', 'scheduled')
schedule_at(qp, id, at)
if g then lane_done(qp, g, now) end
return 1
