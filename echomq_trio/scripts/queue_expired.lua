-- queue_expired: what a claim does with a job it meets past its expiry (meta.expired): keep it
-- dead with the reason 'expired' (the default, like any dead job: listed, replayed, discarded,
-- bounded by the queue's retention), or delete it ('drop'). Counted in metrics.expired either
-- way.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] 'dead', 'drop', or '' to only read the setting
-- Returns the setting in effect: 'dead' or 'drop'.
-- cost: O(1)
local qp = ARGV[1]
if ARGV[2] == '' then return redis.call('HGET', KEYS[1], 'expired') or 'dead' end
created(qp, nil)
if ARGV[2] == 'drop' then
  redis.call('HSET', KEYS[1], 'expired', 'drop')
else
  redis.call('HDEL', KEYS[1], 'expired')
end
return ARGV[2]
