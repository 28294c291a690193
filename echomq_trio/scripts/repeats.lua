-- repeats: read registrations (read only; not a transition).
-- KEYS[1] emq:{q}:repeat (other keys derive from ARGV[1], same slot)
-- ARGV[1] queue prefix, ARGV[2] 'all' or 'due', ARGV[3] limit
-- Returns per registration {name, next run ms, every ms, template, group, last fired ms or ''}.
local qp = ARGV[1]
local limit = tonumber(ARGV[3])
local entries
if ARGV[2] == 'due' then
  entries = redis.call('ZRANGE', KEYS[1], '-inf', now_ms(), 'BYSCORE', 'WITHSCORES', 'LIMIT', 0, limit)
else
  entries = redis.call('ZRANGE', KEYS[1], 0, limit - 1, 'WITHSCORES')
end
local out = {}
for i = 1, #entries, 2 do
  local f = redis.call('HMGET', qp .. 'repeat:' .. entries[i], 'every_ms', 'template', 'group',
    'last_fired_ms')
  if f[1] then
    out[#out + 1] = {entries[i], entries[i + 1], f[1], f[2], f[3] or '', f[4] or ''}
  end
end
return out
