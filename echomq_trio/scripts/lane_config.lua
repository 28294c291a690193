-- lane_config: set a lane's concurrency limit (jobs in flight at once; 0 clears it) and weight
-- (jobs per round-robin turn), then take the lane off or put it on the ring to match.
-- transition: lane any -> ready | idle
-- KEYS[1] emq:{q}:ring (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, ARGV[2] group, ARGV[3] limit ('' keeps it, '0' clears it),
-- ARGV[4] weight ('' keeps it)
-- Returns {limit or 0, weight}.
-- fields: limit, weight
-- cost: O(1)
local qp = ARGV[1]
local g = ARGV[2]
if ARGV[3] == '0' then
  redis.call('HDEL', qp .. KEY.lane_limits, g)
elseif ARGV[3] ~= '' then
  redis.call('HSET', qp .. KEY.lane_limits, g, ARGV[3])
end
if ARGV[4] ~= '' then redis.call('HSET', qp .. KEY.lane_weights, g, ARGV[4]) end
lanes_changed(qp .. KEY.lane_limits)
lanes_changed(qp .. KEY.lane_weights)
-- A lane that can no longer go on stays on the ring until a claim meets it (claim.lua).
ring_add(qp, g, now_ms())
return {
  tonumber(redis.call('HGET', qp .. KEY.lane_limits, g) or '0'),
  tonumber(redis.call('HGET', qp .. KEY.lane_weights, g) or '1'),
}
