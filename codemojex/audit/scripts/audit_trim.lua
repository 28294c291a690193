-- audit_trim: drop the audit records every reader of a consumer group has committed, in one
-- step (a reader that fetches new entries between two separate reads would otherwise lose
-- entries it was handed but had not yet stored).
-- KEYS[1] emq:{q}:audit
-- ARGV[1] consumer group
-- Keeps everything from the oldest entry still pending in the group, or, when none is, from just
-- past the last entry delivered to it. Returns the number of entries removed.
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
local floor
if tonumber(pending[1]) > 0 then
  floor = pending[2]
else
  local last = nil
  for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local fields = {}
    for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
    if fields['name'] == ARGV[1] then last = fields['last-delivered-id'] end
  end
  if not last then return 0 end
  local ms, seq = string.match(last, '^(%d+)-(%d+)$')
  floor = ms .. '-' .. (tonumber(seq) + 1)
end
return redis.call('XTRIM', KEYS[1], 'MINID', floor)
