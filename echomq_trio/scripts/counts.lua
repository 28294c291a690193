-- counts: a consistent snapshot of a queue's sizes (read only; not a transition).
-- KEYS[1] pending   KEYS[2] schedule   KEYS[3] active   KEYS[4] dead   KEYS[5] metrics
-- ARGV: none
-- Returns {pending, scheduled, active, dead, completed total, retried total, dead total}.
local m = redis.call('HMGET', KEYS[5], 'completed', 'retried', 'dead')
return {
  redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4]),
  tonumber(m[1] or 0), tonumber(m[2] or 0), tonumber(m[3] or 0),
}
