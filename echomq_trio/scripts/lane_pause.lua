-- lane_pause: set a lane aside. 'pause' holds it until resumed; 'until' holds it until a time
-- (server ms) and the metronome brings it back by itself; a wait only ever extends.
-- KEYS[1] emq:{q}:ring (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] group, ARGV[3] 'pause' or 'until', ARGV[4] until ms ('until')
-- Returns the lane's wait end in server ms ('until'), or 0 ('pause').
local qp = ARGV[1]
local g = ARGV[2]
redis.call('HSETNX', qp .. 'meta', 'created_ms', now_ms())
if ARGV[3] == 'pause' then
  redis.call('SADD', qp .. 'paused', g)
  emit(qp, 'paused', g)
else
  lane_wait(qp, g, tonumber(ARGV[4]))
  emit(qp, 'paused', g, 'until', ARGV[4])
end
if redis.call('SREM', qp .. 'inring', g) == 1 then redis.call('LREM', KEYS[1], 0, g) end
if ARGV[3] == 'pause' then return 0 end
return tonumber(redis.call('ZSCORE', qp .. 'gwait', g))
