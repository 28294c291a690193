-- counts: a consistent snapshot of a queue's sizes (read only; not a transition).
-- KEYS[1] emq:{q}:pending (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix
-- Returns {exists (1 if the queue was ever used), pending (flat + lanes), scheduled, active,
-- dead, lanes with jobs, paused lanes, waiting lanes, completed total, retried total,
-- dead total, deferred total, repeats}.
local qp = ARGV[1]
local pending = redis.call('ZCARD', KEYS[1])
local groups = redis.call('SMEMBERS', qp .. 'groups')
for _, g in ipairs(groups) do pending = pending + redis.call('ZCARD', qp .. 'g:' .. g) end
local m = redis.call('HMGET', qp .. 'metrics', 'completed', 'retried', 'dead', 'deferred')
return {
  redis.call('EXISTS', qp .. 'meta'),
  pending, redis.call('ZCARD', qp .. 'schedule'),
  redis.call('ZCARD', qp .. 'active'), redis.call('ZCARD', qp .. 'dead'),
  #groups, redis.call('SCARD', qp .. 'paused'), redis.call('ZCARD', qp .. 'gwait'),
  tonumber(m[1] or 0), tonumber(m[2] or 0), tonumber(m[3] or 0), tonumber(m[4] or 0),
  redis.call('ZCARD', qp .. 'repeat'),
}
