-- lane_resume: end a lane's pause and its wait, and put it back in rotation if it has work.
-- transition: lane paused | waiting -> ready | idle
-- KEYS[1] emq:{q}:ring (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] group
-- Returns 'resumed' if the lane was paused or waiting, else 'not_held'.
-- cost: O(log n)
local qp = ARGV[1]
local g = ARGV[2]
local was = redis.call('SREM', qp .. KEY.paused, g) + redis.call('ZREM', qp .. KEY.lane_waits, g)
ring_add(qp, g, now_ms())
lane_forget(qp, g)
if was > 0 then
  emit(qp, 'resumed', g)
  return 'resumed'
end
return 'not_held'
