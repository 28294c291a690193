-- lane_pause: set a lane aside. 'pause' holds it until resumed; 'until' holds it until a time
-- (server ms) and the metronome brings it back by itself; a wait only ever extends.
-- transition: lane any -> paused | waiting
-- KEYS[1] emq:{q}:ring (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] group, ARGV[3] 'pause' or 'until', ARGV[4] until ms
-- ('until')
-- The lane stays on the ring until a claim meets it and takes it off (claim.lua), so a pause
-- never scans the ring.
-- Returns the lane's wait end in server ms ('until'), or 0 ('pause').
-- cost: O(log n)
local qp = ARGV[1]
local g = ARGV[2]
created(qp, now_ms())
if ARGV[3] == 'pause' then
  redis.call('SADD', qp .. KEY.paused, g)
  lanes_changed(qp .. KEY.paused)
  lane_listed(qp, g)
  emit(qp, 'paused', g)
else
  lane_wait(qp, g, tonumber(ARGV[4]))
  emit(qp, 'paused', g, 'until', ARGV[4])
end
if ARGV[3] == 'pause' then return 0 end
return tonumber(redis.call('ZSCORE', qp .. KEY.lane_waits, g))
