-- queue_resume: end a queue's pause (queue_pause) and wake parked consumers for its waiting jobs.
-- transition: none (a queue setting)
-- KEYS[1] emq:{q}:meta (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:
-- Returns 'resumed', or 'not_paused'.
-- cost: O(1)
local qp = ARGV[1]
if redis.call('HDEL', KEYS[1], 'paused') == 0 then return 'not_paused' end
local waiting = redis.call('ZCARD', qp .. KEY.pending)
  + tonumber(redis.call('HGET', qp .. KEY.metrics, 'lane_pending') or '0')
wake(qp, waiting)
emit(qp, 'queue_resumed', string.sub(qp, 6, -3))
return 'resumed'
