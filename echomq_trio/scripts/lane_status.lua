-- lane_status: what a lane holds and why it may be idle (read only).
-- transition: none (read only)
-- KEYS[1] emq:{q}:ring (the other keys are ARGV[1]'s, same slot)
-- ARGV[1] queue prefix emq:{q}:, then groups (none: every lane with pending jobs, a paused lane,
-- or a waiting lane)
-- Returns per lane {group, depth, in flight, limit or 0, weight, paused 0/1, wait until ms or
-- 0, on ring 0/1}.
local qp = ARGV[1]
local groups = {}
if #ARGV > 1 then
  for i = 2, #ARGV do groups[#groups + 1] = ARGV[i] end
else
  local seen = {}
  local function add(g) if not seen[g] then seen[g] = true groups[#groups + 1] = g end end
  for _, g in ipairs(redis.call('SMEMBERS', qp .. KEY.lane_groups)) do add(g) end
  for _, g in ipairs(redis.call('SMEMBERS', qp .. KEY.paused)) do add(g) end
  for _, g in ipairs(redis.call('ZRANGE', qp .. KEY.lane_waits, 0, -1)) do add(g) end
  for _, g in ipairs(redis.call('HKEYS', qp .. KEY.lane_in_flight)) do add(g) end
  table.sort(groups)
end
local out = {}
for _, g in ipairs(groups) do
  out[#out + 1] = {
    g,
    redis.call('ZCARD', qp .. KEY.lane .. g),
    tonumber(redis.call('HGET', qp .. KEY.lane_in_flight, g) or '0'),
    tonumber(redis.call('HGET', qp .. KEY.lane_limits, g) or '0'),
    tonumber(redis.call('HGET', qp .. KEY.lane_weights, g) or '1'),
    redis.call('SISMEMBER', qp .. KEY.paused, g),
    tonumber(redis.call('ZSCORE', qp .. KEY.lane_waits, g) or '0'),
    redis.call('SISMEMBER', qp .. KEY.on_ring, g),
  }
end
return out
