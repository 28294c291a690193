-- lane_resume: end a lane's pause and its wait, and put it back in rotation if it has work.
-- KEYS[1] emq:{q}:ring (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] group
-- Returns 1 if the lane was paused or waiting, else 0.
local qp = ARGV[1]
local g = ARGV[2]
local was = redis.call('SREM', qp .. 'paused', g) + redis.call('ZREM', qp .. 'gwait', g)
ring_add(qp, g, now_ms())
if was > 0 then emit(qp, 'resumed', g) return 1 end
return 0
