-- audit_ack: acknowledge audit records for a consumer group and drop the records every reader of
-- the group has acknowledged, in one step (a reader that fetches new entries between two
-- separate calls would otherwise lose entries it was handed but had not yet stored).
-- transition: none (the audit stream)
-- KEYS[1] emq:{q}:audit
-- ARGV[1] consumer group, then stream ids to acknowledge
-- Keeps everything from the oldest entry still pending in the group, or, when none is, from just
-- past the last entry delivered to it.
-- Returns {entries acknowledged (of those given, the ones pending), entries removed}.
-- fields: acked, trimmed
-- cost: O(ids acknowledged + the group's readers + entries removed)
local group = ARGV[1]
local acked = 0
for i = 2, #ARGV, 1000 do
  acked = acked + redis.call('XACK', KEYS[1], group, unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
local pending = redis.call('XPENDING', KEYS[1], group)
local floor
if tonumber(pending[1]) > 0 then
  floor = pending[2]
else
  local last = nil
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local f = {}
    for i = 1, #info, 2 do f[info[i]] = info[i + 1] end
    if f['name'] == group then last = f['last-delivered-id'] end
  end
  if not last then return {acked, 0} end
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  floor = ms .. '-' .. (tonumber(seq) + 1)
end
return {acked, redis.call('XTRIM', KEYS[1], 'MINID', floor)}
