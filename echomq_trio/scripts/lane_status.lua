-- lane_status: what a lane holds and why it may be idle (read only; not a transition).
-- KEYS[1] emq:{q}:ring (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, then groups (none: every lane with pending jobs, a paused lane, or a
-- waiting lane)
-- Returns per lane {group, depth, in flight, limit or 0, weight, paused 0/1, wait until ms or
-- 0, on ring 0/1}.
local qp = ARGV[1]
local groups = {}
if #ARGV > 1 then
  for i = 2, #ARGV do groups[#groups + 1] = ARGV[i] end
else
  local seen = {}
  local function add(g) if not seen[g] then seen[g] = true groups[#groups + 1] = g end end
  for _, g in ipairs(redis.call('SMEMBERS', qp .. 'groups')) do add(g) end
  for _, g in ipairs(redis.call('SMEMBERS', qp .. 'paused')) do add(g) end
  for _, g in ipairs(redis.call('ZRANGE', qp .. 'gwait', 0, -1)) do add(g) end
  for _, g in ipairs(redis.call('HKEYS', qp .. 'gactive')) do add(g) end
  table.sort(groups)
end
local out = {}
for _, g in ipairs(groups) do
  out[#out + 1] = {
    g,
    redis.call('ZCARD', qp .. 'g:' .. g),
    tonumber(redis.call('HGET', qp .. 'gactive', g) or '0'),
    tonumber(redis.call('HGET', qp .. 'glimit', g) or '0'),
    tonumber(redis.call('HGET', qp .. 'gweight', g) or '1'),
    redis.call('SISMEMBER', qp .. 'paused', g),
    tonumber(redis.call('ZSCORE', qp .. 'gwait', g) or '0'),
    redis.call('SISMEMBER', qp .. 'inring', g),
  }
end
return out
