-- counts: a consistent snapshot of a queue's sizes (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:pending (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- Returns {exists (1 if the queue was ever used), pending (flat + lanes), scheduled, active,
-- dead, lanes with jobs, paused lanes, waiting lanes, completed total, retried total,
-- dead total, deferred total, repeats}.
local qp = ARGV[1]
local pending = redis.call('ZCARD', KEYS[1])
local groups = redis.call('SMEMBERS', qp .. KEY.lane_groups)
for _, g in ipairs(groups) do pending = pending + redis.call('ZCARD', qp .. KEY.lane .. g) end
local m = redis.call('HMGET', qp .. KEY.metrics, 'completed', 'retried', 'dead', 'deferred')
return {
  redis.call('EXISTS', qp .. KEY.meta),
  pending, redis.call('ZCARD', qp .. KEY.schedule),
  redis.call('ZCARD', qp .. KEY.active), redis.call('ZCARD', qp .. KEY.dead),
  #groups, redis.call('SCARD', qp .. KEY.paused), redis.call('ZCARD', qp .. KEY.lane_waits),
  tonumber(m[1] or 0), tonumber(m[2] or 0), tonumber(m[3] or 0), tonumber(m[4] or 0),
  redis.call('ZCARD', qp .. KEY.repeats),
}
